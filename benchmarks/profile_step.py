"""Where a GRPO step's time goes: ``torch.profiler`` over a few steps of grpo_lib's
trainer (the setting of ``step_vs_trl.py``), split into rollout and update.

Prints, for each phase, its wall time and the operators with the most self CPU time
(the matmuls, the sampler's sort/softmax/multinomial, the concatenations of a growing
cache, ...), and the share of the phase's time spent outside any operator: Python and
dispatch overhead.

    python benchmarks/profile_step.py                         # fast engine
    python benchmarks/profile_step.py --engine scratch
    python benchmarks/profile_step.py --engine transformers
    python benchmarks/profile_step.py --count-ops   # aten calls per decode step

``--count-ops`` counts the aten operator calls of one decode step (a rollout of
``n + 16`` tokens minus one of ``n`` tokens, divided by 16) for both engines: a measure
of the per-step dispatch overhead that does not depend on the machine's load.
"""
from __future__ import annotations

import argparse
import tempfile
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function


def digit_share(completions, **kwargs):
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in completions]


def count_ops(top: int) -> None:
    from grpo_lib.fast_decode import decode_fast
    from grpo_lib.models import build_tokenizer, random_model
    from grpo_lib.qwen2 import Qwen2, decode_static
    from grpo_lib.speed import decode_step_ops

    tok = build_tokenizer()
    hf = random_model(tok, size="tiny", seed=0)
    prompts = [[{"role": "user", "content": f"What is {i} + 2?"}] for i in range(4)]
    scratch = Qwen2.from_transformers(hf, share_weights=True)
    engines = {"transformers": (hf, None), "scratch": (scratch, decode_static),
               "fast": (scratch, decode_fast)}
    for name, (model, fn) in engines.items():
        per_op = decode_step_ops(model, tok, prompts, fn)
        busiest = sorted(per_op.items(), key=lambda kv: -kv[1])[:top]
        print(f"{name}: {sum(per_op.values()):.0f} aten calls per decode step; most: "
              + ", ".join(f"{k.removeprefix('aten::')} {v:.0f}" for k, v in busiest))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="fast",
                        choices=["fast", "scratch", "transformers"])
    parser.add_argument("--share-prompt", default=True, dest="share_prompt",
                        action=argparse.BooleanOptionalAction,
                        help="compute each group's prompt once in the update")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--G", type=int, default=8)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=16, dest="micro_batch")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps")
    parser.add_argument("--top", type=int, default=12, help="operators shown per phase")
    parser.add_argument("--count-ops", action="store_true", dest="count_ops",
                        help="aten calls per decode step for both engines, then stop")
    args = parser.parse_args(argv)
    if args.count_ops:
        return count_ops(args.top)

    from grpo_lib.models import build_tokenizer, random_model
    from grpo_lib.tasks import load_task_split
    from grpo_lib.trainer import GRPOConfig, GRPOTrainer

    tok = build_tokenizer()
    model = random_model(tok, size="tiny", seed=0).to(getattr(torch, args.dtype))
    rows = load_task_split("arithmetic", "train").select(
        range(args.prompts * (args.steps + 1)))
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            output_dir=tmp, per_step_prompts=args.prompts, num_generations=args.G,
            max_completion_length=args.length, ignore_eos=True,
            micro_batch_size=args.micro_batch, max_steps=args.steps + 1,
            learning_rate=1e-5, loss_type="dapo", progress_bar=False, sample_every=0,
            seed=0, rollout_engine=args.engine, share_group_prompt=args.share_prompt)
        trainer = GRPOTrainer(model, tok, [digit_share], config,
                              [{"prompt": r["prompt"]} for r in rows])
        sample, update = trainer._sample_batch, trainer._update

        def sample_recorded(*a, **k):
            with record_function("phase: rollout + rewards"):
                return sample(*a, **k)

        def update_recorded(*a, **k):
            with record_function("phase: update"):
                return update(*a, **k)

        trainer._sample_batch, trainer._update = sample_recorded, update_recorded
        trainer.train_step()  # warm-up
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                trainer.train_step()
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    print(f"engine {args.engine}, {args.dtype}, {args.prompts} x G={args.G} x "
          f"{args.length} tokens, {args.steps} profiled steps, {wall:.2f} s under "
          "the profiler (slower than without)")
    phases = {e.key: e for e in events if e.key.startswith("phase: ")}
    for key, e in phases.items():
        print(f"{key}: {e.cpu_time_total / 1e6 / args.steps:.3f} s per step")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
