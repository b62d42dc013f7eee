"""Probe: the update of one `step_vs_trl.py` step (forward + backward of 64
completions in micro-batches of 16, prompt once per group), done four ways.

- ``eager``: the trainer's way, :func:`grpo_lib.shared_prompt.group_logprobs` and
  ``loss.backward()`` per micro-batch, torch's threads on every product;
- ``compiled``: the same function under ``torch.compile`` (inductor, fixed shapes,
  plain products, since packed weights cannot enter a graph as inputs);
- ``threads``: data parallel inside the process, two Python threads with one torch
  thread each, each taking half of the micro-batches (``torch.autograd.grad``), the
  two gradients summed in a fixed order (the same update to round-off).

Why: the update is most of a step on a CPU (chapter 19), and most of it is not its
matrix products but the small element-wise operators around them. Compiling fuses
them; two threads overlap them. Timings: the median of ``--runs`` interleaved updates
after two warm-ups each, the optimizer step left out (the same in every way).

    python benchmarks/update_probe.py
    python benchmarks/update_probe.py --ways eager threads --runs 20
    python benchmarks/update_probe.py --ways eager compiled --new-shapes 25,60 21,48

``--new-shapes P,C ...`` then gives the compiled update batches of other prompt and
completion widths, as a real run does, and times its first call at each (a compile).

Not part of the library: a measurement for issue 11.
"""
from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from grpo_lib.losses import policy_loss
from grpo_lib.models import build_tokenizer
from grpo_lib.shared_prompt import group_logprobs
from grpo_lib.speed import shape_model

WAYS = ("eager", "compiled", "threads")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    p.add_argument("--runs", type=int, default=10, help="timed updates per way")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=23, dest="prompt_len")
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=16, dest="micro_batch")
    p.add_argument("--new-shapes", nargs="*", default=[], dest="new_shapes",
                   metavar="P,C", help="compiled way: then these prompt, completion "
                                       "widths")
    args = p.parse_args(argv)

    model = shape_model(build_tokenizer(), "tiny").train()
    params = list(model.parameters())
    N, G, mb = args.prompts, args.G, args.micro_batch
    P, C = args.prompt_len, args.length
    chunks = [slice(s, s + mb) for s in range(0, N * G, mb)]
    threads = torch.get_num_threads()
    p_ids = p_mask = c_ids = mask = adv = None

    def make_batch(P, C, seed=0):  # random tokens: the time does not depend on them
        nonlocal p_ids, p_mask, c_ids, mask, adv
        gen = torch.Generator().manual_seed(seed)
        p_ids = torch.randint(5, 500, (N * G, P), generator=gen)
        p_mask = torch.ones(N * G, P, dtype=torch.long)
        c_ids = torch.randint(5, 500, (N * G, C), generator=gen)
        mask = torch.ones(N * G, C)
        adv = torch.randn(N * G, generator=gen)

    make_batch(P, C)

    def loss_of(fn, sl):
        logp, _ = fn(model, p_ids[sl][::G], p_mask[sl][::G], c_ids[sl], mask[sl],
                     return_entropy=True, packed=False)
        return policy_loss(logp, None, adv[sl], mask[sl], loss_type="dapo",
                           num_micro_batches=len(chunks),
                           num_items_in_batch=mask.sum(), max_completion_length=C)[0]

    def sequential(fn):
        def update():
            for q in params:
                q.grad = None
            for sl in chunks:
                loss_of(fn, sl).backward()
            return [q.grad for q in params]
        return update

    pool = ThreadPoolExecutor(2)

    def half(part):
        total = None
        for sl in part:
            grads = torch.autograd.grad(loss_of(group_logprobs, sl), params)
            total = grads if total is None else [a + b for a, b in zip(total, grads)]
        return total

    def two_threads():
        torch.set_num_threads(1)
        try:
            k = len(chunks) // 2
            first, second = pool.submit(half, chunks[:k]), pool.submit(half, chunks[k:])
            return [a + b for a, b in zip(first.result(), second.result())]
        finally:
            torch.set_num_threads(threads)

    updates = {"eager": sequential(group_logprobs), "threads": two_threads}
    if "compiled" in args.ways:
        updates["compiled"] = sequential(torch.compile(group_logprobs))
    updates = {way: updates[way] for way in args.ways}
    reference = [g.clone() for g in sequential(group_logprobs)()]
    setup = {}
    for way, update in updates.items():
        start = time.perf_counter()
        grads = update()
        setup[way] = time.perf_counter() - start
        gap = max(float((a - b).abs().max()) for a, b in zip(grads, reference))
        print(f"{way}: first update {setup[way]:.1f} s, largest gradient gap to "
              f"eager {gap:.1e} (largest entry "
              f"{max(float(g.abs().max()) for g in reference):.1e})")
        update()
    times = {way: [] for way in updates}
    for _ in range(args.runs):  # interleaved, so the machine's drift hits every way
        for way, update in updates.items():
            start = time.perf_counter()
            update()
            times[way].append(time.perf_counter() - start)
    base = statistics.median(times[args.ways[0]])
    print(f"{N} prompts x G={G}, {P} + {C} tokens, micro-batches of {mb}, "
          f"{threads} torch threads; median of {args.runs} updates (optimizer step "
          f"not included):")
    for way, values in times.items():
        median = statistics.median(values)
        print(f"  {way:<9} {median * 1e3:7.1f} ms  ({base / median:.2f}x "
              f"{args.ways[0]})")
    for i, pair in enumerate(args.new_shapes if "compiled" in updates else []):
        make_batch(*(int(v) for v in pair.split(",")), seed=i + 1)
        start = time.perf_counter()
        updates["compiled"]()
        first = time.perf_counter() - start
        medians = {}
        for way in ("eager", "compiled"):
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                (updates.get(way) or sequential(group_logprobs))()
                runs.append(time.perf_counter() - start)
            medians[way] = statistics.median(runs)
        print(f"  widths {pair}: compiled first call {first:.1f} s; then eager "
              f"{medians['eager'] * 1e3:.0f} ms, compiled "
              f"{medians['compiled'] * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
