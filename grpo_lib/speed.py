"""How fast a GRPO step could be: the measurements chapter 19 and the benchmarks share.

- :func:`matmul_peak`: the FLOP/s of one large ``torch.matmul`` in a dtype, the rate
  the arithmetic of a step can reach on this machine at best;
- :func:`forward_flops`, :func:`step_flops`: the matrix-multiply FLOPs of a forward
  pass and of one GRPO step (rollout and update), so that a measured time can be set
  against its *floor*, FLOPs / peak;
- :func:`machine_description`: the CPU (or GPU), its cores, torch's threads and
  whether the CPU has bfloat16 hardware (without it a bfloat16 matmul is far slower
  than a float32 one);
- :func:`decode_step_ops`: how many aten operator calls one decode step makes, a
  measure of per-step overhead that does not depend on the machine's load.
"""
from __future__ import annotations

import contextlib
import os
import platform
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

__all__ = ["matmul_peak", "forward_flops", "step_flops", "machine_description",
           "decode_step_ops"]


def matmul_peak(dtype: torch.dtype, size: int = 1024, repeats: int = 30) -> float:
    """FLOP/s of ``torch.matmul`` on ``size x size`` matrices (``2 size^3`` FLOPs):
    the fastest of ``repeats`` timed runs after three warm-ups (a peak is the best
    the machine does; a slower run was disturbed)."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    times = []
    for i in range(repeats + 3):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return 2 * size**3 / min(times)


def forward_flops(cfg, rows: int, new: int, context: int) -> float:
    """Matmul FLOPs of one forward over ``new`` tokens per row that attend to
    ``context`` earlier tokens (plus themselves, causally), logits for every new token:
    ``2 N_mm`` per token (N_mm = weights in matmuls, output layer included) plus
    ``4 H d`` per (query, key) pair and layer (Q K^T and the weighted sum of V)."""
    D, F_, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    H, H_kv, L = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.num_hidden_layers
    d = getattr(cfg, "head_dim", None) or D // H
    n_mm = L * (2 * D * H * d + 2 * D * H_kv * d + 3 * D * F_) + V * D
    pairs = new * context + new * (new + 1) / 2  # keys seen by the new queries
    return rows * (2 * n_mm * new + 4 * L * H * d * pairs)


def step_flops(cfg, rows: int, prompt_len: int, length: int) -> tuple[float, float]:
    """(rollout, update) matmul FLOPs of one step: ``rows`` completions of ``length``
    tokens after ``prompt_len`` prompt tokens. Rollout: a prefill, then ``length - 1``
    one-token decode steps. Update: forward + backward ~ 3 forwards of the whole
    sequence (the backward computes gradients for activations and weights)."""
    rollout = forward_flops(cfg, rows, prompt_len, 0)  # prefill
    rollout += sum(forward_flops(cfg, rows, 1, prompt_len + t)
                   for t in range(length - 1))
    update = 3 * forward_flops(cfg, rows, prompt_len + length, 0)
    return rollout, update


def machine_description() -> dict:
    """CPU model, cores, torch threads and whether the CPU has bfloat16 hardware."""
    name, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name in ("", platform.machine()):
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    bf16 = sorted(f for f in flags if "bf16" in f or f.startswith("amx"))
    device = "cpu"
    if torch.cuda.is_available():
        device, name = "cuda", torch.cuda.get_device_name()
    return {"device": device, "machine": name, "cores": os.cpu_count(),
            "threads": torch.get_num_threads(),
            "bf16_hardware": " ".join(bf16) or "none",
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's C++ start/stop lines) for a while."""
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def decode_step_ops(model, tokenizer, prompts, decode_fn, new: int = 8) -> dict:
    """aten calls per decode step, by operator: the calls of a rollout of
    ``new + 16`` tokens minus those of one of ``new`` tokens, divided by 16
    (``grpo_lib.sampling.generate`` with ``decode_fn``, 2 completions per prompt)."""
    from .sampling import generate

    def counts(n):
        with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            generate(model, tokenizer, prompts, num_generations=2, max_new_tokens=n,
                     seed=0, ignore_eos=True, decode_fn=decode_fn)
        return {e.key: e.count for e in prof.key_averages() if e.key.startswith("aten")}

    short, long = counts(new), counts(new + 16)
    return {k: (long[k] - short.get(k, 0)) / 16 for k in long}
