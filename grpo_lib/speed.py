"""How fast a GRPO step could be: the measurements chapter 19 and the benchmarks share.

- :func:`matmul_peak`: the FLOP/s of one large ``torch.matmul`` in a dtype, the rate
  the arithmetic of a step can reach on this machine at best (timed by
  :func:`fastest_seconds`, which :mod:`grpo_lib.packing` uses too);
- :func:`forward_flops`, :func:`step_flops`: the matrix-multiply FLOPs of a forward
  pass and of one GRPO step (rollout and update), so that a measured time can be set
  against its *floor*, FLOPs / peak;
- :func:`machine_description`, :func:`cpu_name`: the CPU (or GPU), its cores, torch's
  threads and whether the CPU has bfloat16 hardware (without it a bfloat16 matmul is
  far slower than a float32 one);
- :func:`decode_step_ops`: how many aten operator calls one decode step makes, a
  measure of per-step overhead that does not depend on the machine's load;
- :func:`memory_bandwidth`, :func:`decode_read_bytes`: the other floor of a decode
  step, the bytes it must read (every weight, every cached key and value) over the
  rate the device copies memory: on a GPU, decoding is bound by this, not by FLOPs.
"""
from __future__ import annotations

import contextlib
import csv
import os
import platform
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

__all__ = ["fastest_seconds", "matmul_peak", "forward_flops", "step_flops",
           "cpu_name", "machine_description", "decode_step_ops", "memory_bandwidth",
           "decode_read_bytes", "QWEN25_05B_SHAPE", "SHAPES", "shape_model",
           "append_row", "quiet_profile", "sync"]


def fastest_seconds(fn, rounds: int = 5, calls: int = 1, warmups: int = 1) -> float:
    """Seconds per call of ``fn``: the fastest of ``rounds`` timings of ``calls``
    calls each, after ``warmups`` calls (the best the machine does; a slower round
    was disturbed)."""
    for _ in range(warmups):
        fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def matmul_peak(dtype: torch.dtype, size: int = 1024, repeats: int = 30) -> float:
    """FLOP/s of ``torch.matmul`` on ``size x size`` matrices (``2 size^3`` FLOPs):
    the fastest of ``repeats`` timed runs after three warm-ups (a peak is the best
    the machine does; a slower run was disturbed)."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    seconds = fastest_seconds(lambda: torch.matmul(a, b), rounds=repeats, warmups=3)
    return 2 * size**3 / seconds


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


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``'s, where the platform names only the
    architecture), else what :mod:`platform` says."""
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name in ("", platform.machine()):
                return line.split(":", 1)[1].strip()
    return name


def machine_description() -> dict:
    """CPU model, cores, torch threads and whether the CPU has bfloat16 hardware."""
    name, flags = cpu_name(), set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
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
    """Operator calls per decode step, by operator (PyTorch's ``aten`` ones and
    oneDNN's packed products, ``mkldnn``): the calls of a rollout of ``new + 16``
    tokens minus those of one of ``new`` tokens, divided by 16
    (``grpo_lib.sampling.generate`` with ``decode_fn``, 2 completions per prompt)."""
    from .sampling import generate

    def counts(n):
        with quiet_profile() as prof:
            generate(model, tokenizer, prompts, num_generations=2, max_new_tokens=n,
                     seed=0, ignore_eos=True, decode_fn=decode_fn)
        return {e.key: e.count for e in prof.key_averages()
                if e.key.startswith(("aten::", "mkldnn::"))}

    counts(new)  # once before counting: one-time work (packing_pays timing its
    # products, caches) would otherwise land in the first count only
    short, long = counts(new), counts(new + 16)
    return {k: (long[k] - short.get(k, 0)) / 16 for k in long}


def memory_bandwidth(device="cpu", nbytes: int = 1 << 30, repeats: int = 10) -> float:
    """Bytes/s that ``device`` moves in a large copy: ``2 nbytes`` (each byte read once
    and written once) over the fastest of ``repeats`` copies of ``nbytes`` bytes."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = []
    for i in range(repeats + 2):
        sync(src.device)
        t0 = time.perf_counter()
        dst.copy_(src)
        sync(src.device)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return 2 * nbytes / min(times)


def decode_read_bytes(cfg, params: int, rows: int, context: float,
                      bytes_per_number: int) -> float:
    """Bytes one decode step of ``rows`` rows must read at least: every one of the
    model's ``params`` weights once (the output layer included) plus each row's cached
    keys and values, ``2 L H_kv d`` numbers per token of its ``context``."""
    H = cfg.num_attention_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // H
    kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * d * rows * context
    return (params + kv) * bytes_per_number


QWEN25_05B_SHAPE = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                        num_attention_heads=14, num_key_value_heads=2,
                        vocab_size=151936, rope_theta=1000000.0,
                        tie_word_embeddings=True)
"""The widths of Qwen/Qwen2.5-0.5B (its ``config.json``): 494M parameters, 136M of
them in the tied embedding."""

SHAPES = {"tiny": ("tiny", {}), "small": ("small", {}),
          "qwen2.5-0.5b": ("tiny", QWEN25_05B_SHAPE)}
"""Model shapes the benchmarks can build with random weights: the book's sizes
(:data:`grpo_lib.models.MODEL_SIZES`) and Qwen2.5-0.5B's widths."""


def shape_model(tokenizer, shape: str, seed: int = 0):
    """A randomly initialised ``Qwen2ForCausalLM`` of one of :data:`SHAPES` (the
    timing of forced-length rollouts and steps does not depend on the weights)."""
    from .models import random_model

    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose from {sorted(SHAPES)}")
    size, overrides = SHAPES[shape]
    return random_model(tokenizer, size=size, seed=seed, **overrides)


def append_row(path, row: dict) -> None:
    """Append ``row`` to the CSV at ``path`` (the benchmarks' results); when it brings
    a column the file lacks, rewrite the file with the union of the columns (older
    rows get blanks)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows, fields = [], list(row)
    if path.exists():
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            rows = list(reader)
            old = list(reader.fieldnames or [])
        fields = old + [f for f in row if f not in old]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows + [row])


@contextlib.contextmanager
def quiet_profile():
    """``torch.profiler``'s CPU profile without the lines its C++ side writes to
    standard error at start and stop; yields the profiler."""
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        yield prof


def sync(device) -> None:
    """Wait until ``device`` has done the work queued on it, before a clock is read:
    a CUDA call returns once its kernels are launched, not once they have run (a CPU
    queues nothing)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
