r"""The fast decode step: :mod:`grpo_lib.qwen2`'s decoding with few operator calls.

One decode step of the tiny model multiplies 64 rows by matrices of 128-1,024 columns:
little arithmetic, and on a CPU most of its time goes to *calling* operators.
:func:`grpo_lib.qwen2.decode_static` makes about 1,000 aten calls per step (the
modules' views, transposes, dtype casts, RoPE recomputed for every layer, the fused
attention kernel's own set-up, ...), each a few microseconds
(``benchmarks/profile_step.py --count-ops``). This module computes the same function
with about a third fewer calls (chapter 19 counts and times them):

- **fused projections**: the query, key and value weights stacked into one matrix (one
  ``addmm`` with the bias), gate and up into one, and each residual added inside the
  projection that produces it (``addmm(x, a, W)`` is :math:`x + aW`); on a CPU in
  float32 each matrix is copied once per rollout into oneDNN's blocked layout for the
  rollout's row count (:func:`pack_for_rows`) where that makes its product faster on
  the machine at hand (:func:`grpo_lib.packing.packing_pays` measures it);
- **the attention scale folded into the query weights**: RoPE is a rotation, linear,
  so :math:`\mathrm{RoPE}(q/\sqrt d)\cdot k = (\mathrm{RoPE}(q)\cdot k)/\sqrt d`;
- **RoPE from a table** computed once per rollout, with ``rotate_half`` folded into
  the projection: ``rotate_half`` is a product with a fixed matrix :math:`R` of
  :math:`\pm 1` (:func:`rotate_half_matrix`), so :math:`\mathrm{rotate\_half}(hW +
  b) = h(WR) + bR`, and the same ``addmm`` returns the rotated queries and keys too;
- **attention of one query** per row against the static cache as two batched matmuls
  with an additive mask that each step updates in place (one column);
- **inverse-CDF sampling** (:func:`sample_inverse_cdf`): one uniform number per row
  instead of ``torch.multinomial``'s one random number per vocabulary entry; or
  ``torch.multinomial``'s own race with its random numbers made faster, either the
  very same numbers (:func:`sample_multinomial`: the same tokens) or others
  (:func:`sample_race`).

The weights are read from the model at the start of every call (:func:`fuse_weights`
copies them into the fused layout), so a rollout always uses the latest update. The
logits equal :func:`grpo_lib.qwen2.decode_static`'s to float32 round-off
(``tests/test_fast_decode.py``). With :func:`sample_multinomial` (the trainer's default
draw) the tokens are the other engines' from the same seed, until round-off parts a
close race; with the inverse CDF or the race from uniform numbers they follow the same
distribution from another random stream, so a seeded run repeats itself but not a run
of the other engines.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .packing import pack_for_rows, pack_if_it_pays, packed_product
from .qwen2 import Qwen2, StaticKVCache, rope_cos_sin
from .sampling import Rollout, generate, top_p_filter

__all__ = ["pack_for_rows", "Projection", "FusedLayer", "fuse_weights",
           "rotate_half_matrix", "sampling_probs", "sample_inverse_cdf", "sample_race",
           "sample_multinomial", "exponential_from_rand", "exponential_is_rand",
           "inverse_cdf_token", "decode_step", "write_column", "prefill_once",
           "FAST_SAMPLERS", "DecodeStart", "start_decode", "decode_fast",
           "require_finite", "generate_fast"]


@dataclass
class Projection:
    """``x W + b``, plus a residual when given, with ``W`` ``[K, N]``: one ``addmm``,
    or one oneDNN call on :func:`pack_for_rows`' copy of ``W`` when there is one."""

    weight: Tensor  # [K, N]
    bias: Tensor | None = None  # [N]
    packed: Tensor | None = None  # [N, K] in oneDNN's blocked layout

    def __call__(self, x: Tensor, residual: Tensor | None = None) -> Tensor:
        if self.packed is not None:
            y = packed_product(x, self.packed, self.bias)  # [B, N]
            return y if residual is None else y + residual
        add = self.bias if residual is None else (
            residual if self.bias is None else residual + self.bias)
        return x @ self.weight if add is None else torch.addmm(add, x, self.weight)


@dataclass
class FusedLayer:
    """One decoder layer's weights in the fast step's layout (``x @ W`` shapes)."""

    input_norm: Tensor  # [D]
    qkv: Projection  # [D, (2H + 3H_kv) d]: q, k, v, rotate_half(q), rotate_half(k)
    o: Projection  # [H d, D]
    post_norm: Tensor  # [D]
    gate_up: Projection  # [D, 2 F]
    down: Projection  # [F, D]


def fuse_weights(model: Qwen2, rows: int | None = None) -> list[FusedLayer]:
    """Copy each layer's weights of ``model`` into the :class:`FusedLayer` layout (for
    ``rows`` rows a step, packed by :func:`pack_for_rows` where that pays here)."""
    s = model.settings
    scale, d = s.head_dim ** -0.5, s.head_dim

    def proj(weight, bias=None):  # weight [N, K] as nn.Linear stores it
        w = weight.t().contiguous()  # [K, N]
        return Projection(w, bias, None if rows is None else pack_if_it_pays(w, rows))

    layers = []
    with torch.no_grad():
        for layer in model.model.layers:
            a, m = layer.self_attn, layer.mlp
            w_qk = torch.cat([a.q_proj.weight * scale, a.k_proj.weight])  # [., D]
            b_qk = torch.cat([a.q_proj.bias * scale, a.k_proj.bias])  # [(H + H_kv) d]
            R = rotate_half_matrix(d, w_qk.dtype, w_qk.device)
            w_rot = (w_qk.t().reshape(-1, d) @ R).reshape(-1, w_qk.shape[0])
            b_rot = (b_qk.view(-1, d) @ R).flatten()  # rotate_half of the bias
            w_qkv = torch.cat([w_qk, a.v_proj.weight, w_rot.t()])  # [..., D]
            b_qkv = torch.cat([b_qk, a.v_proj.bias, b_rot])
            w_gate_up = torch.cat([m.gate_proj.weight, m.up_proj.weight])  # [2F, D]
            layers.append(FusedLayer(
                layer.input_layernorm.weight.detach(), proj(w_qkv, b_qkv),
                proj(a.o_proj.weight), layer.post_attention_layernorm.weight.detach(),
                proj(w_gate_up), proj(m.down_proj.weight)))
    return layers


def rotate_half_matrix(d: int, dtype=torch.float32, device=None) -> Tensor:
    """``R`` ``[d, d]`` with ``x @ R == rotate_half(x)`` (``[x1, x2] -> [-x2, x1]``):
    one nonzero, +1 or -1, per column, so the product is exact."""
    R = torch.zeros(d, d, dtype=dtype, device=device)
    half = torch.arange(d // 2, device=device)
    R[half + d // 2, half] = -1.0  # output j < d/2 takes -x[j + d/2]
    R[half, half + d // 2] = 1.0  # output j >= d/2 takes x[j - d/2]
    return R


def sampling_probs(logits: Tensor, temperature: float = 1.0,
                   top_p: float = 1.0) -> Tensor:
    r""":math:`\mathrm{softmax}(z / \tau)` of ``logits`` ``[B, V]`` restricted to the
    top-p nucleus, in float32: the distribution the fast draws sample from. Refuses
    :math:`\tau \le 0` (greedy decoding is an argmax, not a draw).
    Returns ``[B, V]``."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 to sample, got {temperature!r}; "
                         "for greedy decoding take logits.argmax(-1).")
    return top_p_filter(logits.float() / temperature, top_p).softmax(dim=-1)


def sample_inverse_cdf(logits: Tensor, temperature: float = 1.0, top_p: float = 1.0,
                       generator: torch.Generator | None = None,
                       u: Tensor | None = None) -> Tensor:
    r"""Draw one token per row of ``logits`` ``[B, V]`` from
    :math:`\mathrm{softmax}(z / \tau)` (restricted to the top-p nucleus) by inverting
    its cumulative distribution:

    .. math:: y = \min\{v : F_v > u\,F_V\}, \qquad F_v = \sum_{w \le v} p_w,
              \quad u \sim \mathcal{U}[0, 1)

    so token :math:`v` is drawn with probability :math:`(F_v - F_{v-1}) / F_V = p_v`
    (:math:`F_V` is 1 up to round-off; scaling by it keeps :math:`y` in range). One
    uniform number per row, drawn from ``generator`` unless given as ``u`` ``[B]``.
    Returns ``[B]``.
    """
    cdf = sampling_probs(logits, temperature, top_p).cumsum(dim=-1)  # [B, V]
    if u is None:
        u = torch.rand(cdf.shape[0], generator=generator, device=cdf.device)  # [B]
    return inverse_cdf_token(cdf, u)


def sample_race(logits: Tensor, temperature: float = 1.0, top_p: float = 1.0,
                generator: torch.Generator | None = None) -> Tensor:
    r"""Draw one token per row of ``logits`` ``[B, V]`` from
    :math:`\mathrm{softmax}(z / \tau)` (the top-p nucleus) by the exponential race
    that ``torch.multinomial`` runs:

    .. math:: y = \arg\max_v \, p_v / e_v, \qquad e_v = -\log u_v \sim
              \mathrm{Exp}(1), \quad u_v \sim \mathcal{U}[0, 1)

    so token :math:`v` wins with probability :math:`p_v`. ``torch.multinomial`` draws
    the :math:`e_v` with ``exponential_``; here they come from uniform numbers, which
    a CPU makes several times faster (chapter 19). The same distribution, another
    random stream. Returns ``[B]``."""
    probs = sampling_probs(logits, temperature, top_p)  # [B, V]
    u = torch.rand(probs.shape, generator=generator, device=probs.device)  # [B, V]
    return (probs / u.log_().neg_()).argmax(dim=-1)  # u = 0 gives e = inf: no win


def sample_multinomial(logits: Tensor, temperature: float = 1.0, top_p: float = 1.0,
                       generator: torch.Generator | None = None,
                       e: Tensor | None = None) -> Tensor:
    r"""``torch.multinomial``'s token for each row of ``logits`` ``[B, V]``, bit for
    bit, with its random numbers made faster on a CPU (chapter 19 times both).

    ``torch.multinomial`` runs the race of :func:`sample_race`, with
    :math:`e_v = -\log(1 - u_v)` and :math:`u_v` uniform *float64* numbers from
    ``generator``, one per entry in row order. ``torch.rand(..., dtype=float64)``
    makes the very same :math:`u_v` from the same generator faster than
    ``exponential_`` does: the same token, and the generator left in the same state.
    Where that does not hold (a CUDA device, or a torch whose CPU ``exponential_``
    draws otherwise: :func:`exponential_is_rand` checks) this calls
    ``torch.multinomial``. Given ``e`` ``[B, V]``, the numbers that
    ``torch.empty_like(probs).exponential_(generator=generator)`` would make (a CUDA
    graph's buffer), it runs the race on them: ``torch.multinomial``'s own last two
    operations. Returns ``[B]``."""
    probs = sampling_probs(logits, temperature, top_p)  # [B, V] float32
    if e is not None:
        return (probs / e).argmax(dim=-1)  # [B]
    if probs.device.type != "cpu" or not exponential_is_rand():
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # [B]
    if not bool(probs.sum(dim=-1).isfinite().all()):  # as torch.multinomial refuses
        raise RuntimeError("probability tensor contains either `inf`, `nan` or "
                           "element < 0: the logits are not finite (a diverged model?)")
    e = exponential_from_rand(probs.shape, generator)  # [B, V]
    return torch.max(probs / e, dim=-1).indices  # argmax (first of ties), but faster


def exponential_from_rand(shape, generator: torch.Generator | None = None) -> Tensor:
    r""":math:`-\log(1 - u)` in float32 for uniform float64 :math:`u` ``[*shape]``
    from ``generator``, on the CPU: what ``torch.empty(shape).exponential_()`` makes.
    """
    u = torch.rand(shape, dtype=torch.float64, generator=generator)  # [*shape]
    return u.neg_().log1p_().neg_().float()


@functools.lru_cache(maxsize=None)
def exponential_is_rand() -> bool:
    """Whether this torch's CPU ``exponential_`` equals :func:`exponential_from_rand`
    number for number and leaves its generator in the same state (checked once per
    process, on 3 x 1,000 numbers)."""
    ours, theirs = (torch.Generator().manual_seed(2025) for _ in range(2))
    want = torch.empty(3, 1000).exponential_(generator=theirs)
    got = exponential_from_rand((3, 1000), ours)
    return torch.equal(got, want) and torch.equal(ours.get_state(), theirs.get_state())


def inverse_cdf_token(cdf: Tensor, u: Tensor) -> Tensor:
    r"""The token :math:`\min\{v : F_v > u F_V\}` of each row of ``cdf`` ``[B, V]``
    (a cumulative sum of probabilities, :math:`F_V` its last entry, 1 up to
    round-off), for ``u`` ``[B]`` in ``[0, 1)``. Returns ``[B]``."""
    token = torch.searchsorted(cdf, u[:, None] * cdf[:, -1:], right=True)  # [B, 1]
    return token.squeeze(-1).clamp(max=cdf.shape[-1] - 1)  # [B]


def decode_step(model: Qwen2, layers: list[FusedLayer], token: Tensor,
                column: int | Tensor, cos: Tensor, sin: Tensor, bias: Tensor,
                cache: StaticKVCache) -> Tensor:
    """Logits ``[B, V]`` of the next token after ``token`` ``[B]``, which sits in
    ``column`` of the cache. ``cos, sin``: ``[B, 1, d]`` at the rows' positions;
    ``bias``: ``[B, max_len]``, 0 where a key may be read, very negative elsewhere.
    ``column`` may be a ``[1]`` tensor (the step a CUDA graph replays,
    :mod:`grpo_lib.graph_decode`): then every shape is the same at every step, the
    attention reading all ``max_len`` columns, ``bias`` hiding the unwritten ones."""
    s = model.settings
    H, H_kv, d, eps = (s.num_attention_heads, s.num_key_value_heads, s.head_dim,
                       s.rms_norm_eps)
    x = F.embedding(token, model.model.embed_tokens.weight)  # [B, D]
    B, D = x.shape
    S = bias.shape[1] if torch.is_tensor(column) else column + 1  # keys read
    mask = bias[:, None, None, :S]  # [B, 1, 1, S]
    for i, w in enumerate(layers):
        h = F.rms_norm(x, (D,), w.input_norm, eps)  # [B, D]
        qkv = w.qkv(h)  # [B, (2H + 3H_kv) d]
        qk = qkv[:, :(H + H_kv) * d].view(B, H + H_kv, d)  # queries and keys
        rotated = qkv[:, (H + 2 * H_kv) * d:].view(B, H + H_kv, d)  # rotate_half(qk)
        qk = torch.addcmul(qk * cos, rotated, sin)  # RoPE, [B, H + H_kv, d]
        v = qkv[:, (H + H_kv) * d:(H + 2 * H_kv) * d].view(B, H_kv, d)
        write_column(cache.keys[i], column, qk[:, H:])  # [B, H_kv, d]
        write_column(cache.values[i], column, v)
        q = qk[:, :H].reshape(B, H_kv, H // H_kv, d)  # [B, H_kv, H/H_kv, d]
        keys = cache.keys[i][:, :, :S]  # [B, H_kv, S, d]
        scores = torch.softmax(q @ keys.transpose(-1, -2) + mask, dim=-1)
        out = scores @ cache.values[i][:, :, :S]  # [B, H_kv, H/H_kv, d]
        x = w.o(out.view(B, H * d), residual=x)  # [B, D]
        gate, up = w.gate_up(F.rms_norm(x, (D,), w.post_norm, eps)).chunk(2, -1)
        x = w.down(F.silu(gate) * up, residual=x)  # [B, D]
    x = F.rms_norm(x, (D,), model.model.norm.weight, eps)  # [B, D]
    head = model.model.embed_tokens if model.lm_head is None else model.lm_head
    return x @ head.weight.t()  # [B, V]


def write_column(buffer: Tensor, column: int | Tensor, value: Tensor) -> None:
    """``buffer[:, :, column] = value`` (``[B, H_kv, max_len, d]`` and ``[B, H_kv,
    d]``), with ``column`` an int or a ``[1]`` tensor (read on the device, no sync)."""
    if torch.is_tensor(column):
        buffer.index_copy_(2, column, value[:, :, None])
    else:
        buffer[:, :, column] = value


def prefill_once(model: Qwen2, ids: Tensor, mask: Tensor, positions: Tensor,
                 cache: StaticKVCache) -> Tensor:
    """Run the prompts ``ids, mask, positions`` ``[b, P]`` through ``model``, each
    distinct prompt once (a GRPO rollout repeats every prompt G times in consecutive
    rows), and write their keys and values into columns ``0 .. P-1`` of ``cache`` for
    every row. Returns the last position's logits ``[b, V]``."""
    rows = torch.cat([ids, mask], dim=1)  # [b, 2P]: equal rows, equal prompts
    unique, inverse = torch.unique_consecutive(rows, dim=0, return_inverse=True)
    if len(unique) == len(rows):
        return model(ids, mask, positions, cache=cache, start=0, last_only=True)[:, -1]
    first = torch.zeros(len(unique), dtype=torch.long, device=ids.device)
    first[inverse] = torch.arange(len(rows), device=ids.device)  # a row of each
    small = StaticKVCache(model.settings, len(unique), ids.shape[1],
                          cache.keys[0].dtype, ids.device)
    logits = model(ids[first], mask[first], positions[first], cache=small, start=0,
                   last_only=True)[:, -1]  # [n, V]
    P = ids.shape[1]
    for big, little in zip(cache.keys + cache.values, small.keys + small.values):
        big[:, :, :P] = little[inverse]  # [b, H_kv, P, d]
    return logits[inverse]  # [b, V]


FAST_SAMPLERS = ("inverse_cdf", "multinomial", "race")
"""How :func:`decode_fast` draws a token: :func:`sample_inverse_cdf` (one uniform
number per row), :func:`sample_multinomial` (``torch.multinomial``'s tokens bit for
bit, the standard path's draw: the same tokens from the same generator) or
:func:`sample_race` (``torch.multinomial``'s race, from uniform numbers)."""


@dataclass
class DecodeStart:
    """What a fast decode loop starts from, made by :func:`start_decode`."""

    logits: Tensor  # [b, V] the next-token logits after the last prompt token
    cache: StaticKVCache  # [b, H_kv, P + max_new_tokens, d] per layer, prompts written
    layers: list[FusedLayer]
    cos_table: Tensor  # [1, T, d] RoPE's cos at positions 0 .. T - 1
    sin_table: Tensor  # [1, T, d]
    bias: Tensor  # [b, P + max_new_tokens] 0 where a key may be read
    position: Tensor  # [b] the position of each row's last prompt token


def start_decode(model: Qwen2, ids: Tensor, mask: Tensor,
                 max_new_tokens: int) -> DecodeStart:
    """Prefill the left-padded prompts ``ids, mask`` ``[b, P]`` (each distinct prompt
    once) into a static cache of ``P + max_new_tokens`` columns, fuse the weights and
    tabulate RoPE: everything the decode steps read."""
    (b, P), device = ids.shape, ids.device
    s, width = model.settings, P + max_new_tokens
    dtype = model.model.embed_tokens.weight.dtype
    cache = StaticKVCache(s, b, width, dtype, device)
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)  # [b, P]
    logits = prefill_once(model, ids, mask, positions, cache)  # [b, V]
    table = torch.arange(positions.max() + max_new_tokens + 1, device=device)
    cos_table, sin_table = rope_cos_sin(table[None], s.head_dim, s.rope_theta, dtype)
    bias = torch.full((b, width), torch.finfo(dtype).min, dtype=dtype, device=device)
    bias[:, :P].masked_fill_(mask.bool(), 0.0)  # [b, width]: prompt tokens readable
    return DecodeStart(logits, cache, fuse_weights(model, rows=b), cos_table,
                       sin_table, bias, positions[:, -1])


def decode_fast(model: Qwen2, ids: Tensor, mask: Tensor, *, max_new_tokens: int,
                temperature: float = 1.0, top_p: float = 1.0, do_sample: bool = True,
                generator: torch.Generator | None = None, stop_ids: Sequence[int],
                pad_id: int, ignore_eos: bool = False, use_cache: bool = True,
                sampler: str = "inverse_cdf", cuda_graph: bool = True):
    r""":func:`grpo_lib.qwen2.decode_static` with :func:`decode_step` and
    :func:`sample_inverse_cdf`: the prefill is the model's own forward, once per
    distinct prompt (:func:`prefill_once`), every later token one fast step.

    Same arguments, and ``sampler`` (:data:`FAST_SAMPLERS`); returns
    ``(completion_ids [b, C], completion_mask [b, C],
    finished [b], sampler_logprobs [b, C])``, the last being the log-probability of
    each chosen token under :math:`\mathrm{softmax}(z / \tau)` in the sampler's own
    numerics (:math:`\tau = 1` when greedy; 0 after a row's stop token), which the
    importance-sampling correction compares with the trainer's
    (:func:`grpo_lib.losses.sampling_importance_weights`). Runs in float32 and
    bfloat16 alike (the attention's softmax in the model's dtype). Logits that are
    not finite in a row still writing raise (:func:`require_finite`), whatever the
    draw.

    On a CUDA device with ``cuda_graph`` (the default), greedy, inverse-CDF and
    multinomial decoding replay each step as a CUDA graph
    (:func:`grpo_lib.graph_decode.decode_graphed`: the same draws, the same
    outputs to round-off); the race sampler always runs step by step.
    """
    if not use_cache:
        raise ValueError("decode_fast always decodes over its static cache; for "
                         "use_cache=False use grpo_lib.sampling.decode_batch.")
    if sampler not in FAST_SAMPLERS:
        raise ValueError(f"sampler={sampler!r}; choose one of {FAST_SAMPLERS}.")
    greedy = not do_sample or temperature == 0
    if cuda_graph and ids.is_cuda and (greedy or sampler != "race"):
        from .graph_decode import decode_graphed

        return decode_graphed(model, ids, mask, max_new_tokens=max_new_tokens,
                              temperature=temperature, top_p=top_p,
                              do_sample=do_sample, generator=generator,
                              stop_ids=stop_ids, pad_id=pad_id, ignore_eos=ignore_eos,
                              sampler=sampler)
    b, P = ids.shape
    start = start_decode(model, ids, mask, max_new_tokens)
    logits, position, bias = start.logits, start.position, start.bias
    stop = torch.tensor(list(stop_ids), device=ids.device)  # [S]
    finished = torch.zeros(b, dtype=torch.bool, device=ids.device)  # [b]
    tokens, alive, logprobs = [], [], []  # C x [b]
    tau = 1.0 if greedy else temperature
    for step in range(max_new_tokens):
        if greedy:
            token = logits.argmax(dim=-1)  # [b]
        elif sampler == "inverse_cdf":
            token = sample_inverse_cdf(logits, temperature, top_p, generator)  # [b]
        elif sampler == "race":
            token = sample_race(logits, temperature, top_p, generator)  # [b]
        else:
            token = sample_multinomial(logits, temperature, top_p, generator)  # [b]
        token = torch.where(finished, pad_id, token)
        logp = torch.log_softmax(logits.float() / tau, dim=-1)  # [b, V]
        logprobs.append(logp.gather(1, token[:, None]).squeeze(1))  # [b]
        alive.append(~finished)
        tokens.append(token)
        if not ignore_eos:
            finished = finished | torch.isin(token, stop)
            if bool(finished.all()):
                break
        if step == max_new_tokens - 1:
            break
        column = P + step
        bias[:, column] = 0.0
        position = position + 1  # [b]
        cos = start.cos_table[0, position, None]  # [b, 1, d]
        sin = start.sin_table[0, position, None]
        logits = decode_step(model, start.layers, token, column, cos, sin, bias,
                             start.cache)
    completion = torch.stack(tokens, dim=1)  # [b, C]
    alive = torch.stack(alive, dim=1)  # [b, C]
    sampler_logp = torch.stack(logprobs, dim=1).masked_fill(~alive, 0.0)  # [b, C]
    return completion, alive.long(), finished, require_finite(sampler_logp)


def require_finite(sampler_logp: Tensor) -> Tensor:
    """``sampler_logp`` ``[b, C]`` (0 after a row's stop), unchanged, or a clear
    error. A chosen token's log-probability is not finite only when its row's logits
    were not (``nan`` or ``+inf``, a diverged model); the draw from such a row is
    arbitrary, and ``torch.multinomial`` would have refused it."""
    if not bool(sampler_logp.isfinite().all()):
        rows = (~sampler_logp.isfinite()).any(dim=-1).nonzero().flatten().tolist()
        raise RuntimeError(
            f"decoding met logits that are not finite (nan or inf) in rows {rows[:8]}"
            f"{' ...' if len(rows) > 8 else ''}: the model has diverged, so its "
            "tokens would be arbitrary. Check the weights for nan "
            "(any(p.isnan().any() for p in model.parameters())), and resume from an "
            "earlier checkpoint, with a lower learning rate.")
    return sampler_logp


def generate_fast(model: Qwen2, tokenizer, prompts: Sequence, num_generations: int = 1,
                  max_new_tokens: int = 64, temperature: float = 1.0,
                  top_p: float = 1.0, do_sample: bool = True,
                  batch_size: int | None = None, seed: int | None = None, *,
                  stop_token_ids: Sequence[int] | None = None,
                  ignore_eos: bool = False) -> Rollout:
    """:func:`grpo_lib.sampling.generate` with :func:`decode_fast` as the decode loop
    (prompts, padding, seeding and the returned :class:`~grpo_lib.sampling.Rollout`
    are the same)."""
    return generate(model, tokenizer, prompts, num_generations, max_new_tokens,
                    temperature, top_p, do_sample, batch_size, seed,
                    stop_token_ids=stop_token_ids, ignore_eos=ignore_eos,
                    decode_fn=decode_fast)
