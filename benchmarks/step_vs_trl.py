"""Seconds per GRPO step: grpo_lib's trainer vs TRL's GRPOTrainer, in one process.

Both trainers get the same model weights (separate copies), the same chat prompts, the
same group size G, the same number of completions per optimizer step and micro-batch
size, float32, beta = 0, num_iterations = 1, and completions forced to exactly
``--length`` tokens (ours: ``ignore_eos``; TRL: ``min_new_tokens = max_new_tokens``), so
both do the same arithmetic per step. The reward is the share of digits in a completion
(cheap, with group variance, so the update is not trivially zero).

Timing: a step is the wall time between two consecutive end-of-step callbacks (so it
includes each trainer's own overheads and logging); *generation* is the time inside the
sampling call (ours: ``grpo_lib.sampling.generate``, from ``metrics.csv``; TRL: its
``_generate`` method, timed by a wrapper); *update* is the rest of the step (rewards,
advantages, log-probs, backward, optimizer). Reported: the median over the steps after
``--warmup`` warm-up steps.

Ours rolls out with ``--engine`` (default ``fast``: :mod:`grpo_lib.fast_decode`'s
decode step over the policy's own weights; ``scratch``: the from-scratch Qwen2 of
``grpo_lib.qwen2`` with its static KV cache, the same tokens as ``transformers``;
``transformers``: the policy itself); the fast engine draws with ``--sampler``
(default: the trainer's ``rollout_sampler``, ``multinomial``; ``inverse_cdf`` is the
draw a CUDA graph replays). In the update ours computes each group's prompt
once (``--share-prompt``, on by default; ``--no-share-prompt`` computes it G times, as
TRL does): the same log-probs and gradients, (G-1)P/(G(P+C)) less work in the layers.
``--dtype bfloat16`` casts the model for ours and gives TRL ``bf16=True``. On a CPU in
float32 ours multiplies by oneDNN-packed weights where :mod:`grpo_lib.packing`
measures that faster on the machine (``--packing auto``, the default; ``always``;
``never``).

The *floor* printed beside the measurements is the step's matrix-multiply FLOPs
(rollout: prefill + one token per row per decode step; update: forward + backward = 3
forwards over prompt + completion) divided by the peak of ``torch.matmul`` on
1024 x 1024 matrices in the run's dtype, measured in the same process. ``--csv PATH``
appends one row per run with the machine's description (CPU model, cores, threads,
bf16 hardware).

    python benchmarks/step_vs_trl.py                       # tiny Qwen2, random weights
    python benchmarks/step_vs_trl.py --model data/models/tiny-qwen2-base --steps 8
    python benchmarks/step_vs_trl.py --csv benchmarks/results/step_vs_trl.csv
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime
import io
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

from grpo_lib.fast_decode import FAST_SAMPLERS
from grpo_lib.packing import PACKING_MODES, packing, packing_mode
from grpo_lib.speed import (SHAPES, append_row, machine_description, matmul_peak,
                            shape_model, step_flops)


def digit_share(completions, **kwargs):
    """Share of digit characters (accepts plain strings and TRL's message lists)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in texts]


def _median(values):
    return statistics.median(values) if values else float("nan")


def run_ours(model, tokenizer, prompts, args, out_dir):
    from grpo_lib.trainer import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        output_dir=out_dir,
        per_step_prompts=args.prompts,
        num_generations=args.G,
        max_completion_length=args.length,
        ignore_eos=True,
        micro_batch_size=args.micro_batch,
        max_steps=args.warmup + args.steps,
        learning_rate=1e-5,
        loss_type=args.loss_type,
        beta=0.0,
        num_iterations=1,
        temperature=1.0,
        top_p=1.0,
        progress_bar=False,
        sample_every=0,
        seed=0,
        rollout_engine=args.engine,
        rollout_sampler=args.sampler,
        share_group_prompt=args.share_prompt,
    )
    ends = []
    trainer = GRPOTrainer(
        model,
        tokenizer,
        [digit_share],
        config,
        [{"prompt": p} for p in prompts],
        callbacks=[lambda tr, m: ends.append(time.perf_counter())],
    )
    start = time.perf_counter()
    metrics = trainer.train()
    ends.insert(0, start)
    step = [b - a for a, b in zip(ends, ends[1:])][args.warmup :]
    gen = metrics["time_generate"].tolist()[args.warmup :]
    lengths = metrics["completion_length"].tolist()[args.warmup :]
    return step, gen, lengths


def _checkpointing_field(config_class) -> str:
    """The name of the activation-recomputation switch: transformers renamed
    ``gradient_checkpointing`` to ``activation_checkpointing`` (5.17 has the old one)."""
    names = {f.name for f in dataclasses.fields(config_class)}
    return ("activation_checkpointing" if "activation_checkpointing" in names
            else "gradient_checkpointing")


def run_trl(model, tokenizer, prompts, args, out_dir):
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    batch = args.prompts * args.G
    accumulation = batch // args.micro_batch
    config = TRLConfig(
        output_dir=out_dir,
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        bf16=args.dtype == "bfloat16",
        fp16=False,
        seed=0,
        disable_tqdm=True,
        save_strategy="no",
        logging_steps=10_000,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=accumulation,
        num_generations=args.G,
        max_completion_length=args.length,
        generation_kwargs={"min_new_tokens": args.length},
        max_steps=args.warmup + args.steps,
        learning_rate=1e-5,
        loss_type=args.loss_type,
        beta=0.0,
        num_iterations=1,
        temperature=1.0,
        top_p=1.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        dataloader_num_workers=0,
        **{_checkpointing_field(TRLConfig): False},  # TRL's default is on; ours never
    )                                                # recomputes activations

    ends, gen_now, gen_per_step, lengths = [], [0.0], [], []

    class Clock(TrainerCallback):
        def on_train_begin(self, *a, **k):
            ends.append(time.perf_counter())

        def on_step_end(self, *a, **k):
            ends.append(time.perf_counter())
            gen_per_step.append(gen_now[0])
            gen_now[0] = 0.0

    dataset = Dataset.from_list([{"prompt": p} for p in prompts])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = TRLTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=[digit_share],
            args=config,
            train_dataset=dataset,
            callbacks=[Clock()],
        )
    inner = trainer._generate

    def timed_generate(*a, **k):  # time TRL's sampling call, change nothing else
        t0 = time.perf_counter()
        out = inner(*a, **k)
        gen_now[0] += time.perf_counter() - t0
        lengths.append(sum(len(c) for c in out[1]) / max(1, len(out[1])))
        return out

    trainer._generate = timed_generate
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")  # and no end-of-training log dict
        trainer.train()
    step = [b - a for a, b in zip(ends, ends[1:])][args.warmup :]
    return step, gen_per_step[args.warmup :], lengths[args.warmup :]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        default=None,
        help="checkpoint folder (default: random tiny Qwen2 weights)",
    )
    parser.add_argument("--shape", default=None, choices=sorted(SHAPES),
                        help="random weights of this shape (default: random tiny)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--G", type=int, default=8, help="completions per prompt")
    parser.add_argument("--length", type=int, default=64, help="tokens per completion")
    parser.add_argument("--micro-batch", type=int, default=16, dest="micro_batch")
    parser.add_argument("--loss-type", default="dapo", dest="loss_type")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="measured steps")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each trainer")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--engine", default="fast",
                        choices=["fast", "scratch", "transformers"],
                        help="ours: rollout_engine (default: the fast decode step)")
    parser.add_argument("--sampler", default=None,
                        choices=FAST_SAMPLERS,
                        help="ours, fast engine: rollout_sampler (default: the "
                             "trainer's, multinomial; a CUDA graph replays it and "
                             "inverse_cdf; race is multinomial's race from uniform "
                             "numbers)")
    parser.add_argument("--share-prompt", default=True, dest="share_prompt",
                        action=argparse.BooleanOptionalAction,
                        help="ours: compute each group's prompt once in the update "
                             "(share_group_prompt; default on)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--csv", default=None, help="append the result row here")
    parser.add_argument("--skip-trl", action="store_true", dest="skip_trl",
                        help="measure ours only (no ratio)")
    parser.add_argument("--packing", default=None, choices=PACKING_MODES,
                        help="ours on a CPU in float32: multiply by oneDNN-packed "
                             "weights where that measures faster here (auto), always "
                             "or never (default: $GRPO_LIB_PACKING, else auto)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = round(os.getloadavg()[0], 2)  # ~0 on an idle machine

    from grpo_lib.models import build_tokenizer, load_model_and_tokenizer
    from grpo_lib.sampling import tokenize_prompts
    from grpo_lib.tasks import load_task_split
    from grpo_lib.trainer import GRPOConfig

    args.sampler = args.sampler or GRPOConfig().rollout_sampler  # the trainer's default

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.model:
        model, tokenizer = load_model_and_tokenizer(args.model, device=device)
        name = args.model
    else:  # random weights; the default name is the one the committed rows carry
        tokenizer = build_tokenizer()
        model = shape_model(tokenizer, args.shape or "tiny").to(device)
        name = (f"random Qwen2 of the {args.shape} shape" if args.shape
                else "random tiny Qwen2")
    dtype = getattr(torch, args.dtype)
    model = model.to(dtype)
    n = args.prompts * (args.warmup + args.steps)
    prompts = [
        row["prompt"] for row in load_task_split("arithmetic", "train").select(range(n))
    ]

    results = {"grpo_lib": ([], [], []), "TRL 1.16": ([], [], [])}
    runners = {"grpo_lib": run_ours, "TRL 1.16": run_trl}
    if args.skip_trl:
        del results["TRL 1.16"], runners["TRL 1.16"]
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    args.packing = args.packing or packing_mode()
    with tempfile.TemporaryDirectory() as tmp, packing(args.packing):
        for repeat in range(args.repeats):  # alternate, so background load hits both
            for label, fn in runners.items():
                torch.manual_seed(0)
                out = f"{tmp}/{label.split()[0]}-{repeat}"
                measured = fn(copy.deepcopy(model), tokenizer, prompts, args, out)
                for acc, values in zip(results[label], measured):
                    acc.extend(values)

    params = sum(p.numel() for p in model.parameters())
    machine = machine_description()
    rows_per_step = args.prompts * args.G
    now = datetime.datetime.now(datetime.timezone.utc)
    pad = tokenizer.pad_token_id
    prompt_len = tokenize_prompts(tokenizer, prompts[:args.prompts], pad)[1].shape[1]
    flops = step_flops(model.config, rows_per_step, prompt_len, args.length)
    peak = matmul_peak(dtype)
    floor = sum(flops) / peak
    print(f"model: {name} ({params / 1e6:.2f}M params, {args.dtype}) | device: "
          f"{machine['device']} | ours rolls out with: {args.engine}"
          + (f" ({args.sampler} draw)" if args.engine == "fast" else "")
          + f", prompt once per group in the update: {args.share_prompt}"
          + f", packed weights: {args.packing}")
    print(f"machine: {machine['machine']}, {machine['cores']} cores, torch "
          f"{torch.__version__} ({machine['cpu_capability']}), "
          f"{machine['threads']} threads, bf16 hardware: {machine['bf16_hardware']}")
    print(
        f"step: {args.prompts} prompts x G={args.G} = {rows_per_step} "
        f"completions of {args.length} tokens after {prompt_len} prompt tokens, "
        f"micro-batch {args.micro_batch}, loss {args.loss_type}"
    )
    print(f"work: {flops[0] / 1e9:.1f} GFLOP rollout + {flops[1] / 1e9:.1f} GFLOP "
          f"update; matmul peak ({args.dtype}, 1024^2): {peak / 1e9:.0f} GFLOP/s")
    measured = args.steps * args.repeats
    print(f"median of {measured} steps ({args.warmup} warm-up steps per run dropped)")
    header = ("trainer", "s/step", "generate", "update", "tokens")
    print("{:<10} {:>8} {:>9} {:>8} {:>7}".format(*header))
    g_floor, u_floor = flops[0] / peak, flops[1] / peak
    print(f"{'floor':<10} {floor:>8.3f} {g_floor:>9.3f} {u_floor:>8.3f}")
    rows = {}
    for label, (step, gen, lengths) in results.items():
        s, g = _median(step), _median(gen)
        u = _median([a - b for a, b in zip(step, gen)])
        rows[label] = (s, g, u)
        print(f"{label:<10} {s:>8.3f} {g:>9.3f} {u:>8.3f} {_median(lengths):>7.1f}")
    s0, g0, u0 = rows["grpo_lib"]
    s1, g1, u1 = rows.get("TRL 1.16", (float("nan"),) * 3)
    if "TRL 1.16" in rows:
        print(f"{'TRL/ours':<10} {s1 / s0:>7.2f}x {g1 / g0:>8.2f}x {u1 / u0:>7.2f}x")
    print(f"{'ours/floor':<10} {s0 / floor:>7.2f}x {g0 * peak / flops[0]:>8.2f}x "
          f"{u0 * peak / flops[1]:>7.2f}x")
    print("(each column is its own median, so generate + update need not add up)")
    peak_gib = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    if peak_gib is not None:
        print(f"peak GPU memory allocated (both trainers): {peak_gib:.1f} GiB")
    if args.csv:
        import transformers

        try:
            import trl
            trl_version = trl.__version__
        except ImportError:
            trl_version = ""
        result = {
            "date": now.strftime("%Y-%m-%d %H:%M"), **machine,
            "load_1min_before": load_before, "model": name,
            "params": params, "dtype": args.dtype, "engine": args.engine,
            "share_prompt": args.share_prompt,
            "prompts": args.prompts, "G": args.G, "length": args.length,
            "prompt_len": prompt_len, "micro_batch": args.micro_batch,
            "loss_type": args.loss_type, "steps": measured,
            "ours_s": round(s0, 4), "ours_gen_s": round(g0, 4),
            "ours_update_s": round(u0, 4), "trl_s": round(s1, 4),
            "trl_gen_s": round(g1, 4), "trl_update_s": round(u1, 4),
            "trl_over_ours": round(s1 / s0, 3),
            "rollout_gflop": round(flops[0] / 1e9, 2),
            "update_gflop": round(flops[1] / 1e9, 2),
            "peak_gflops": round(peak / 1e9, 1), "floor_s": round(floor, 4),
            "ours_over_floor": round(s0 / floor, 2), "torch": torch.__version__,
            "sampler": args.sampler if args.engine == "fast" else "multinomial",
            "packing": args.packing,
            "cuda_graph": (args.engine == "fast" and device == "cuda"
                           and args.sampler != "race"),
            "peak_gpu_gib": "" if peak_gib is None else round(peak_gib, 2),
            "transformers": transformers.__version__, "trl": trl_version,
        }
        append_row(Path(args.csv), result)
        print(f"appended a row to {args.csv}")
    return rows


if __name__ == "__main__":
    main()
