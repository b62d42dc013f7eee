"""Probe: one fast decode step (``grpo_lib.fast_decode.decode_step``, chapter 19) eager
with oneDNN-packed products, eager with plain ``addmm`` products, and compiled by
``torch.compile`` (inductor, fixed shapes, optionally ``cpp_wrapper``) with plain
products.

Why: at 64 rows a decode step of the tiny model spends part of its time dispatching
~700 operator calls from Python; a compiled step fuses the small operators and, with
``cpp_wrapper``, calls the rest from C++. The packed weights cannot enter a compiled
graph as inputs (inductor's oneDNN linear lowering needs them frozen as constants,
which would mean compiling again after every update), so the compiled step multiplies
by plain weights. The step reads all columns of the cache (the column in a tensor, as
the CUDA-graph step does), so every call has the same shapes.

    python benchmarks/fast_step_compile_probe.py              # 64 rows, cpp_wrapper
    python benchmarks/fast_step_compile_probe.py --rows 1 --no-cpp-wrapper

Not part of the library: a measurement for issue 11.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch._inductor.config as inductor_config

from grpo_lib import fast_decode as fd
from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.packing import packing
from grpo_lib.qwen2 import Qwen2


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--context", type=int, default=84, help="keys already written")
    p.add_argument("--calls", type=int, default=30, help="calls per timing")
    p.add_argument("--runs", type=int, default=8, help="timings (interleaved)")
    p.add_argument("--cpp-wrapper", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    inductor_config.cpp_wrapper = args.cpp_wrapper
    tok = build_tokenizer()
    model = Qwen2.from_transformers(random_model(tok, size="tiny", seed=0),
                                    share_weights=True).eval()
    b, P, new = args.rows, 24, 128
    torch.manual_seed(0)
    ids = torch.randint(10, 500, (b, P))
    mask = torch.ones(b, P, dtype=torch.long)
    with torch.inference_mode():
        with packing("always"):  # packed whether or not it pays on this machine
            start = fd.start_decode(model, ids, mask, new)  # layers packed for b rows
        plain = fd.fuse_weights(model, rows=None)  # plain addmm products
        column = args.context - 1
        start.bias[:, :args.context] = 0.0
        token = torch.randint(10, 500, (b,))
        position = start.position + (args.context - P)
        cos = start.cos_table[0, position, None]  # [b, 1, d]
        sin = start.sin_table[0, position, None]
        as_tensor = torch.tensor([column])
        compiled = torch.compile(fd.decode_step, dynamic=False)
        t0 = time.perf_counter()
        out = compiled(model, plain, token, as_tensor, cos, sin, start.bias,
                       start.cache)
        print(f"compile + first call: {time.perf_counter() - t0:.1f} s "
              f"(cpp_wrapper={args.cpp_wrapper})")
        ref = fd.decode_step(model, plain, token, as_tensor, cos, sin, start.bias,
                             start.cache)
        print(f"max |logit difference| compiled vs eager: "
              f"{(out - ref).abs().max().item():.2e}")
        steps = {
            "eager, packed products": lambda: fd.decode_step(
                model, start.layers, token, column, cos, sin, start.bias, start.cache),
            "eager, plain products": lambda: fd.decode_step(
                model, plain, token, column, cos, sin, start.bias, start.cache),
            "compiled, plain products": lambda: compiled(
                model, plain, token, as_tensor, cos, sin, start.bias, start.cache),
        }
        times = {name: [] for name in steps}
        for _ in range(args.runs):  # interleaved, so a change in load hits all three
            for name, step in steps.items():
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    step()
                times[name].append((time.perf_counter() - t0) / args.calls)
    print(f"one decode step, {b} rows, {args.context} keys, random tiny Qwen2, "
          f"{torch.get_num_threads()} threads, median of {args.runs} x {args.calls}")
    for name, ts in times.items():
        print(f"{name:<26} {1e6 * statistics.median(ts):8.0f} us")


if __name__ == "__main__":
    main()
