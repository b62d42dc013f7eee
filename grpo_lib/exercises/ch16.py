"""Checkers for chapter 16 (Qwen2 from scratch). Solutions: book/solutions/ch16.md."""
from __future__ import annotations

from numbers import Integral

import torch

from ..qwen2 import Qwen2Settings, apply_rope, rms_norm, rope_cos_sin


def reference_rope(x: torch.Tensor, positions: torch.Tensor,
                   theta: float) -> torch.Tensor:
    """Qwen2's rotary embedding of ``x`` ``[B, heads, T, d]`` at ``positions``
    ``[B, T]``: pair ``i`` is ``(x_i, x_{i + d/2})``, turned by the angle
    ``m * theta^(-2i/d)``."""
    cos, sin = rope_cos_sin(positions, x.shape[-1], theta, x.dtype)
    return apply_rope(x, cos, sin)


def _norm_cases():
    g = torch.Generator().manual_seed(16)
    return [
        ("x = [[3, 4]], w = [1, 2], eps = 0", torch.tensor([[3.0, 4.0]]),
         torch.tensor([1.0, 2.0]), 0.0),
        ("random [2, 5, 8], eps = 1e-6", torch.randn(2, 5, 8, generator=g) * 3 + 1,
         torch.rand(8, generator=g) + 0.5, 1e-6),
        ("a row of zeros, eps = 1e-6", torch.zeros(1, 4), torch.ones(4), 1e-6),
        ("x of order 1e-3, eps = 1e-4: where eps goes matters",
         torch.randn(2, 8, generator=g) * 1e-3, torch.rand(8, generator=g) + 0.5, 1e-4),
        ("bfloat16 input", (torch.randn(3, 16, generator=g) * 40).bfloat16(),
         torch.rand(16, generator=g).bfloat16() + 0.5, 1e-6),
        ("float16 input near 500, whose squares overflow float16",
         (torch.randn(2, 16, generator=g) * 100 + 500).half(),
         torch.rand(16, generator=g).half() + 0.5, 1e-6),
    ]


def check_rms_norm(fn) -> bool:
    """Check ``fn(x [..., D], weight [D], eps) -> [..., D]``, Qwen2's RMSNorm: the
    root mean square in float32, the result cast back to ``x``'s dtype, then scaled.

    Known value: ``x = [[3, 4]], w = [1, 2], eps = 0`` -> ``[[0.8485, 2.2627]]``.
    """
    for label, x, weight, eps in _norm_cases():
        expected = rms_norm(x, weight, eps)
        got = fn(x.clone(), weight.clone(), eps)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            raise AssertionError(f"{label}: expected a tensor of shape "
                                 f"{tuple(expected.shape)}, got {got!r:.80}.")
        rtol = {torch.bfloat16: 1e-2, torch.float16: 2e-3}.get(x.dtype, 1e-5)
        if torch.allclose(got.float(), expected.float(), rtol=rtol, atol=1e-6):
            continue
        hint = ""
        xf = x.float()
        centred = xf - xf.mean(-1, keepdim=True)
        layer_norm = weight * centred / torch.sqrt(centred.pow(2).mean(-1, True) + eps)
        if x.dtype == torch.float16 and not torch.isfinite(x.pow(2)).all():
            hint = (" Its squares overflow float16 (largest 65504): compute the mean "
                    "square in float32, then cast the result back.")
        elif torch.isnan(got).any():
            hint = " NaN: where does eps go, and what if every x_i is 0?"
        elif torch.allclose(got.float(), layer_norm.float(), atol=1e-4):
            hint = (" That is LayerNorm: RMSNorm subtracts no mean, it divides by the "
                    "root mean square of x itself.")
        elif torch.allclose(got.float(), (expected / weight).float(), atol=1e-4):
            hint = " The learned scale `weight` is missing."
        raise AssertionError(f"{label}: expected {expected.flatten()[:4].tolist()}, "
                             f"got {got.flatten()[:4].tolist()}.{hint}")
    print("check_rms_norm: correct, with eps, for a zero row, for bfloat16 input and "
          "for float16 input whose squares only float32 holds.")
    return True


def _rope_cases():
    g = torch.Generator().manual_seed(61)
    positions = torch.tensor([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])  # row 1 left-padded
    return [
        ("one head, d = 4, positions 0..4", torch.randn(1, 1, 5, 4, generator=g),
         positions[:1], 10000.0),
        ("2 rows x 3 heads, d = 8, left padding", torch.randn(2, 3, 5, 8, generator=g),
         positions, 10000.0),
        ("theta = 1e6 (Qwen2.5), d = 16", torch.randn(2, 2, 5, 16, generator=g),
         positions * 37, 1e6),
    ]


def _interleaved_rope(x, positions, theta):
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = positions[:, None, :, None].float() * inv  # [B, 1, T, d/2]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * angle.cos() - odd * angle.sin()
    out[..., 1::2] = even * angle.sin() + odd * angle.cos()
    return out


def check_rope(fn) -> bool:
    """Check ``fn(x [B, heads, T, d], positions [B, T], theta) -> [B, heads, T, d]``:
    Qwen2's rotary embedding, pair ``i`` = ``(x_i, x_{i+d/2})`` turned by the angle
    ``m * theta^(-2i/d)`` at position ``m``."""
    for label, x, positions, theta in _rope_cases():
        expected = reference_rope(x, positions, theta)
        got = fn(x.clone(), positions.clone(), theta)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            raise AssertionError(f"{label}: expected a tensor of shape "
                                 f"{tuple(expected.shape)}, got {got!r:.80}.")
        if torch.allclose(got, expected, atol=1e-5):
            continue
        hint = ""
        if torch.allclose(got, _interleaved_rope(x, positions, theta), atol=1e-5):
            hint = (" You rotated neighbours (x_0, x_1), (x_2, x_3), ...: that is the "
                    "original RoFormer layout; Qwen2 (like Llama in transformers) "
                    "pairs dimension i with i + d/2.")
        elif torch.allclose(got, reference_rope(x, -positions, theta), atol=1e-5):
            hint = " The rotation goes the wrong way: check the sign of the sine term."
        elif torch.allclose(got[0, :, :1], expected[0, :, :1], atol=1e-5):
            hint = (" Position 0 is right (no rotation) but later ones are not: check "
                    "the frequencies theta^(-2i/d).")
        gap = (got - expected).abs().max().item()
        raise AssertionError(f"{label}: output differs from the expected rotation "
                             f"by up to {gap:.3g}.{hint}")
    print("check_rope: correct pairs, frequencies and direction, also under padding.")
    return True


def reference_kv_cache_bytes(s: Qwen2Settings, batch_size: int, max_len: int,
                             bytes_per_number: int) -> int:
    """``2 * L * B * H_kv * max_len * d * bytes``: a key and a value buffer per layer,
    ``[B, H_kv, max_len, d]`` each."""
    return (2 * s.num_hidden_layers * batch_size * s.num_key_value_heads * max_len
            * s.head_dim * bytes_per_number)


def _cache_cases():
    qwen25 = Qwen2Settings(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                           num_hidden_layers=24, num_attention_heads=14,
                           num_key_value_heads=2, head_dim=64, rope_theta=1e6,
                           tie_word_embeddings=True)
    tiny = Qwen2Settings(vocab_size=512, hidden_size=128, intermediate_size=512,
                         num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    return [("tiny, 64 rows x 160 columns, float32", tiny, 64, 160, 4),
            ("Qwen2.5-0.5B shape, 16 rows x 1224 columns, bfloat16", qwen25, 16, 1224,
             2),
            ("Qwen2.5-0.5B shape, 1 row x 1 column, float32", qwen25, 1, 1, 4)]


def check_kv_cache_bytes(fn) -> bool:
    """Check ``fn(settings, batch_size, max_len, bytes_per_number) -> int``: the bytes
    of a :class:`~grpo_lib.qwen2.StaticKVCache` of that size."""
    for label, s, B, max_len, b in _cache_cases():
        expected = reference_kv_cache_bytes(s, B, max_len, b)
        got = fn(s, B, max_len, b)
        if not isinstance(got, Integral):
            if isinstance(got, float) and got == int(got):
                got = int(got)
            else:
                raise AssertionError(f"{label}: expected a whole number of bytes, "
                                     f"got {got!r}.")
        if got == expected:
            continue
        hint = ""
        if got == expected * s.queries_per_kv_head and s.queries_per_kv_head > 1:
            hint = (" You counted every query head; with grouped-query attention the "
                    "cache holds only the key/value heads.")
        elif got * 2 == expected:
            hint = " The cache holds keys AND values."
        elif got == expected // s.num_hidden_layers:
            hint = " Every layer has its own cache."
        raise AssertionError(
            f"{label}: expected {expected:,} bytes, got {got:,}.{hint}")
    print("check_kv_cache_bytes: correct for the tiny and the Qwen2.5-0.5B shapes.")
    return True
