"""Throughput of the book's sampler (grpo_lib.sampling.generate) vs transformers' generate.

Both decode the same prompts (``--prompts`` problems x ``--G`` completions each) with the
same model, sampling at temperature 1 with top-p 1 (no top-k), and both are forced to emit
exactly ``--max-new-tokens`` tokens per row (EOS stopping off: ``ignore_eos=True`` for the
sampler, ``min_new_tokens = max_new_tokens`` for ``generate``), so they do the same work.
Both expand each prompt to ``G`` rows themselves (``num_return_sequences=G`` for
``generate``). Each is timed end to end (chat messages in, decoded texts out) after a warm-up run; the median
of ``--runs`` runs is reported as tokens/s = rows x new tokens / seconds.

    python benchmarks/sampler_vs_generate.py                  # CPU or the visible GPU
    python benchmarks/sampler_vs_generate.py --model PATH --device cuda --dtype bfloat16
    python benchmarks/sampler_vs_generate.py --shape qwen2.5-0.5b --device cuda \
        --dtype bfloat16                    # random weights of Qwen2.5-0.5B's shape

On a GPU the fast engine replays each decode step as a CUDA graph
(``grpo_lib.graph_decode``; ``--no-cuda-graph`` runs it step by step), and the script
prints the *weight-read floor* beside the measurements: the bytes a decode step must
read (every weight once, every cached key and value) over the rate the device copies
memory, measured in the same run (``grpo_lib.speed``).
"""
from __future__ import annotations

import argparse
import functools
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grpo_lib.fast_decode import FAST_SAMPLERS  # noqa: E402
from grpo_lib.models import (  # noqa: E402
    build_tokenizer,
    count_parameters,
    load_model_and_tokenizer,
    random_model,
    stop_token_ids,
)
from grpo_lib.packing import PACKING_MODES, packing, packing_mode  # noqa: E402
from grpo_lib.sampling import generate, tokenize_prompts  # noqa: E402
from grpo_lib.speed import (SHAPES, append_row, decode_read_bytes,  # noqa: E402
                            memory_bandwidth, shape_model, sync)
from grpo_lib.tasks.arithmetic import chat_prompt, make_problems  # noqa: E402

DEFAULT_MODEL = ROOT / "data" / "models" / "tiny-qwen2-base"


def load(args):
    """The model and tokenizer to benchmark, plus a short description of the model."""
    dtype = getattr(torch, args.dtype) if args.dtype else None
    if args.shape:
        tok = build_tokenizer()
        model = shape_model(tok, args.shape).to(device=args.device,
                                                dtype=dtype or torch.float32)
        return model, tok, f"random Qwen2 of the {args.shape} shape"
    if args.model or DEFAULT_MODEL.exists():
        path = args.model or str(DEFAULT_MODEL)
        model, tok = load_model_and_tokenizer(path, device=args.device, dtype=dtype)
        name = args.model or str(DEFAULT_MODEL.relative_to(ROOT))
        return model, tok, name
    tok = build_tokenizer()
    model = random_model(tok, size="tiny", seed=0).to(args.device)
    if dtype is not None:
        model = model.to(dtype)
    return model, tok, "random tiny Qwen2 (data/models/tiny-qwen2-base not found)"


def run_sampler(model, tok, prompts, args) -> float:
    decode_fn = None
    if args.engine in ("scratch", "fast"):  # the from-scratch Qwen2, same tensors
        from grpo_lib.fast_decode import decode_fast
        from grpo_lib.qwen2 import Qwen2, decode_static

        model = Qwen2.from_transformers(model, share_weights=True)
        decode_fn = (functools.partial(decode_fast, cuda_graph=args.cuda_graph,
                                       sampler=args.sampler)
                     if args.engine == "fast" else decode_static)
    sync(args.device)
    start = time.perf_counter()
    generate(model, tok, prompts, num_generations=args.G,
             max_new_tokens=args.max_new_tokens, temperature=1.0, top_p=1.0,
             do_sample=not args.greedy, seed=0, ignore_eos=True, decode_fn=decode_fn)
    sync(args.device)
    return time.perf_counter() - start


def run_hf(model, tok, prompts, args) -> float:
    sync(args.device)
    start = time.perf_counter()
    texts = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
             for p in prompts]
    # generate refuses num_return_sequences > 1 for greedy: repeat the rows instead
    repeat = args.G if args.greedy else 1
    texts = [t for t in texts for _ in range(repeat)]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    enc = {k: v.to(args.device) for k, v in enc.items()}
    with torch.inference_mode():
        out = model.generate(
            **enc, num_return_sequences=args.G // repeat, do_sample=not args.greedy,
            temperature=1.0, top_p=1.0, top_k=0,
            max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
            eos_token_id=stop_token_ids(tok), pad_token_id=tok.pad_token_id)
    tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    sync(args.device)
    new = out.shape[1] - enc["input_ids"].shape[1]
    if new != args.max_new_tokens or out.shape[0] != len(prompts) * args.G:
        raise RuntimeError(f"generate produced {tuple(out.shape)} (new tokens {new}), "
                           f"expected {len(prompts) * args.G} rows of "
                           f"{args.max_new_tokens} new tokens; the comparison is unfair.")
    return time.perf_counter() - start


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None,
                   help="checkpoint folder or hub name (default: "
                        "data/models/tiny-qwen2-base, else a random tiny Qwen2)")
    p.add_argument("--shape", default=None, choices=sorted(SHAPES),
                   help="random weights of this shape instead of a checkpoint")
    p.add_argument("--cuda-graph", default=True, dest="cuda_graph",
                   action=argparse.BooleanOptionalAction,
                   help="fast engine on CUDA: replay each step as a CUDA graph")
    p.add_argument("--sampler", default="multinomial", choices=FAST_SAMPLERS,
                   help="fast engine's draw (grpo_lib.fast_decode.FAST_SAMPLERS; "
                        "default: the trainer's rollout_sampler)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, help="e.g. bfloat16 (default: as saved)")
    p.add_argument("--prompts", type=int, default=16, help="number of distinct prompts")
    p.add_argument("--G", type=int, default=8, help="completions per prompt")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--runs", type=int, default=5, help="timed runs (median reported)")
    p.add_argument("--greedy", action="store_true", help="greedy instead of sampling")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--csv", default=None, help="append the result row to this CSV file")
    p.add_argument("--engine", default="fast",
                   choices=["fast", "scratch", "transformers"],
                   help="the sampler: grpo_lib.fast_decode's step (default), "
                        "grpo_lib.qwen2 + static cache, or the transformers model "
                        "with a DynamicCache")
    p.add_argument("--packing", default=None, choices=PACKING_MODES,
                   help="fast engine on a CPU in float32: oneDNN-packed weights where "
                        "that measures faster here (auto), always or never (default: "
                        "$GRPO_LIB_PACKING, else auto)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.packing = args.packing or packing_mode()
    with packing(args.packing):
        return measure(args)


def measure(args) -> dict:
    """Time both samplers as ``main``'s ``args`` say; print and return the row."""
    model, tok, name = load(args)
    prompts = [chat_prompt(pr.question) for pr in make_problems(args.prompts, seed=123)]
    rows = args.prompts * args.G
    run_sampler(model, tok, prompts, args)  # warm-up (allocator, kernels, caches)
    run_hf(model, tok, prompts, args)
    t_ours, t_hf = [], []
    for _ in range(args.runs):  # interleaved so drifts in machine load hit both alike
        t_ours.append(run_sampler(model, tok, prompts, args))
        t_hf.append(run_hf(model, tok, prompts, args))
    med_ours, med_hf = statistics.median(t_ours), statistics.median(t_hf)
    tokens = rows * args.max_new_tokens
    device = (torch.cuda.get_device_name(0) if args.device.startswith("cuda")
              else f"CPU {platform.machine()} ({torch.get_num_threads()} threads)")
    result = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "device": device,
        "model": name,
        "params": count_parameters(model),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "rows": rows,
        "new_tokens": args.max_new_tokens,
        "mode": "greedy" if args.greedy else "sample",
        "engine": args.engine,
        "sampler": args.sampler if args.engine == "fast" else "",
        "packing": args.packing if args.engine == "fast" else "",
        "sampler_s": round(med_ours, 4),
        "generate_s": round(med_hf, 4),
        "sampler_tok_s": round(tokens / med_ours, 1),
        "generate_tok_s": round(tokens / med_hf, 1),
        "ratio": round(med_hf / med_ours, 3),
        "torch": torch.__version__,
    }
    import transformers

    result["transformers"] = transformers.__version__
    result["cuda_graph"] = args.engine == "fast" and args.cuda_graph and (
        args.device.startswith("cuda")) and (
        args.greedy or args.sampler != "race")  # decode_fast graphs all but the race
    print(f"device: {device} | model: {name} ({result['params']:,} params, "
          f"{result['dtype']})")
    print(f"{args.prompts} prompts x G={args.G} = {rows} rows, {args.max_new_tokens} new "
          f"tokens each ({result['mode']}), median of {args.runs} runs after a warm-up")
    print(f"{'':<22}{'seconds':>10}{'tokens/s':>12}")
    print(f"sampler engine: {args.engine}"
          + (f", {args.sampler} draw" if args.engine == "fast" else "")
          + (", CUDA graph" if result["cuda_graph"] else "")
          + (f", packed weights: {args.packing}" if args.engine == "fast" else ""))
    if args.device.startswith("cuda"):  # decoding is bound by reading memory there
        pad = tok.pad_token_id
        prompt_len = tokenize_prompts(tok, prompts, pad)[1].shape[1]
        bandwidth = memory_bandwidth(args.device)
        element = next(model.parameters()).element_size()
        context = prompt_len + args.max_new_tokens / 2  # mean keys read per step
        step_bytes = decode_read_bytes(model.config, result["params"], rows, context,
                                       element)
        floor_s = args.max_new_tokens * step_bytes / bandwidth
        result.update(bandwidth_gbs=round(bandwidth / 1e9, 1),
                      floor_tok_s=round(tokens / floor_s, 1),
                      sampler_over_floor=round(med_ours / floor_s, 2))
        print(f"{'weight-read floor':<22}{floor_s:>10.3f}{tokens / floor_s:>12.1f}"
              f"   ({step_bytes / 1e6:.1f} MB per step at {bandwidth / 1e9:,.0f} GB/s)")
    print(f"{'grpo_lib sampler':<22}{med_ours:>10.3f}{tokens / med_ours:>12.1f}")
    print(f"{'transformers generate':<22}{med_hf:>10.3f}{tokens / med_hf:>12.1f}")
    print(f"ratio (sampler tokens/s / generate tokens/s): {result['ratio']:.2f}")
    if "floor_tok_s" in result:
        print(f"sampler time / floor: {result['sampler_over_floor']:.2f}x")
    if args.csv:
        append_row(Path(args.csv), result)
        print(f"appended to {args.csv}")
    return result


if __name__ == "__main__":
    main()
