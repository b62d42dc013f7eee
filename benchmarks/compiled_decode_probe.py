"""Probe: does ``torch.compile`` of one fixed-shape decode step beat the eager static-
cache loop (``grpo_lib.qwen2.decode_static``) on this machine?

Why: on the tiny model a decode step issues ~1,000 aten calls (``profile_step.py
--count-ops``) for ~0.1 GFLOP of matmuls, so the rollout is bound by per-operator
dispatch, not arithmetic. A compiled step fuses the small operators. To compile once,
every step has the same shapes: attention reads *all* ``S`` columns of the static
cache (``S`` = prompt + budget rounded up to 64), the columns not yet written masked
out, and the new key/value is written with ``index_copy_`` at a column held in a
tensor. Fusion changes the summation order, so the logits agree with the eager loop to
float32 round-off, not bit for bit: greedy tokens are compared and reported.

    python benchmarks/compiled_decode_probe.py                 # 64 rows x 128 tokens
    python benchmarks/compiled_decode_probe.py --rows 64 --new 64 --runs 3

Not part of the library until measured on an idle machine.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.qwen2 import (Qwen2, StaticKVCache, apply_rope, decode_static,
                            rope_cos_sin)
from grpo_lib.sampling import next_token, tokenize_prompts
from grpo_lib.tasks import load_task_split


def fixed_step(model, token, position, column, keys, values, mask):
    """Logits ``[b, V]`` for one new token per row, shapes independent of the step."""
    s = model.settings
    b, d = token.shape[0], s.head_dim
    x = model.model.embed_tokens(token[:, None])  # [b, 1, D]
    cos, sin = rope_cos_sin(position, d, s.rope_theta, x.dtype)  # [b, 1, d]
    allowed = mask.bool()[:, None, None, :]  # [b, 1, 1, S]
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        h = layer.input_layernorm(x)
        q = attn.q_proj(h).view(b, 1, -1, d).transpose(1, 2)  # [b, H, 1, d]
        k = attn.k_proj(h).view(b, 1, -1, d).transpose(1, 2)  # [b, H_kv, 1, d]
        v = attn.v_proj(h).view(b, 1, -1, d).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        keys[i].index_copy_(2, column, k)  # in place, column held in a tensor
        values[i].index_copy_(2, column, v)
        out = attn.attend(q, keys[i], values[i], allowed)  # [b, H, 1, d]
        x = x + attn.o_proj(out.transpose(1, 2).reshape(b, 1, -1))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    head = model.model.embed_tokens if model.lm_head is None else model.lm_head
    return F.linear(model.model.norm(x), head.weight)[:, -1]  # [b, V]


def decode_fixed(model, ids, mask, new, step_fn, greedy, seed):
    """The decode loop of ``decode_static`` (no stop tokens) with ``step_fn``."""
    (b, P), s = ids.shape, model.settings
    S = -(-(P + new) // 64) * 64  # rounded up: one shape for nearby prompt widths
    cache = StaticKVCache(s, b, S)
    full = torch.zeros(b, S, dtype=torch.long)
    full[:, :P] = mask
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(ids, mask, positions, cache=cache, start=0, last_only=True)[:, -1]
    position, tokens = positions[:, -1:], []
    gen = torch.Generator().manual_seed(seed)
    for t in range(new):
        token = next_token(logits, 1.0, 1.0, not greedy, gen)
        tokens.append(token)
        if t == new - 1:
            break
        full[:, P + t] = 1
        position = position + 1
        logits = step_fn(model, token, position, torch.tensor([P + t]), cache.keys,
                         cache.values, full)
    return torch.stack(tokens, 1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tok = build_tokenizer()
    model = Qwen2.from_transformers(random_model(tok, size="tiny", seed=0))
    prompts = load_task_split("arithmetic", "train")["prompt"][:args.rows]
    _, ids, mask = tokenize_prompts(tok, prompts, tok.pad_token_id)
    compiled = torch.compile(fixed_step, dynamic=False)
    kw = dict(max_new_tokens=args.new, stop_ids=[0], pad_id=0, ignore_eos=True,
              do_sample=False)
    with torch.inference_mode():
        t0 = time.perf_counter()
        decode_fixed(model, ids, mask, args.new, compiled, True, 0)
        print(f"compile + first rollout: {time.perf_counter() - t0:.1f} s")
        eager_greedy = decode_static(model, ids, mask, **kw)[0]
        fixed_greedy = decode_fixed(model, ids, mask, args.new, compiled, True, 0)
        same = (eager_greedy == fixed_greedy).float().mean().item()
        print(f"greedy tokens equal to decode_static's: {same:.4f}")
        times = {"decode_static (eager)": [], "fixed step, compiled": []}
        for _ in range(args.runs):  # interleaved
            t0 = time.perf_counter()
            decode_static(model, ids, mask, **{**kw, "do_sample": True})
            times["decode_static (eager)"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            decode_fixed(model, ids, mask, args.new, compiled, False, 0)
            times["fixed step, compiled"].append(time.perf_counter() - t0)
    tokens = args.rows * args.new
    print(f"{args.rows} rows x {args.new} tokens, {torch.get_num_threads()} threads, "
          f"median of {args.runs}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:<24} {m:7.3f} s {tokens / m:9.0f} tokens/s")


if __name__ == "__main__":
    main()
