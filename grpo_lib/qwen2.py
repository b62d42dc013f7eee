r"""Qwen2 from scratch: the decoder of Qwen2 and Qwen2.5 in plain PyTorch.

Every model in the book is a Qwen2 (Yang et al., 2024): a stack of pre-norm decoder
layers, each

.. math::

    h &= x + \mathrm{Attn}(\mathrm{RMSNorm}(x)) \\
    y &= h + \mathrm{SwiGLU}(\mathrm{RMSNorm}(h))

with rotary position embeddings inside the attention, grouped-query attention (several
query heads share one key/value head), a bias on the query, key and value projections
(Qwen2's one difference from Llama), a final RMSNorm and an output layer that may reuse
the embedding matrix (tied embeddings). This module writes each block as a short
function next to its formula, reads any Hugging Face Qwen2 checkpoint folder
(``config.json`` + safetensors, the same parameter names) and returns the logits of
``transformers.Qwen2ForCausalLM`` to round-off (``tests/test_qwen2_scratch.py``).

It also decodes with a **static KV cache**: one preallocated key buffer and one value
buffer per layer, ``[B, n_kv_heads, max_len, head_dim]``, written in place, so a decode
step allocates no cache memory and reads the keys of every earlier token from one
contiguous buffer. Greedy output equals ``model.generate(do_sample=False)`` token for
token on the book's checkpoints.

Simplified on purpose: no sliding-window attention (Qwen2 checkpoints ship with it off),
no rope scaling (``rope_type`` must be ``"default"``), no dropout, no training-time
tricks (gradient checkpointing); the model is still differentiable.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .sampling import Rollout, generate, next_token

__all__ = [
    "Qwen2Settings",
    "rms_norm",
    "rope_cos_sin",
    "rotate_half",
    "apply_rope",
    "attention_allowed",
    "grouped_query_attention",
    "sdpa_attention",
    "swiglu",
    "RMSNorm",
    "Attention",
    "MLP",
    "DecoderLayer",
    "Qwen2Body",
    "Qwen2",
    "StaticKVCache",
    "load_qwen2",
    "decode_static",
    "generate_static",
    "parameter_count",
    "activation_bytes",
    "saved_activation_bytes",
    "training_memory",
]


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class Qwen2Settings:
    """The numbers that define a Qwen2 model, read from a Hugging Face ``config.json``.

    Only what the forward pass needs; :meth:`from_dict` refuses configs this
    implementation would compute differently from ``transformers`` (another
    architecture, sliding-window attention, scaled rope).
    """

    vocab_size: int
    hidden_size: int  # D
    intermediate_size: int  # the SwiGLU width, F
    num_hidden_layers: int  # L
    num_attention_heads: int  # H, query heads
    num_key_value_heads: int  # H_kv, key/value heads; H / H_kv query heads share one
    head_dim: int  # d, usually D / H
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    eos_token_id: tuple[int, ...] = ()

    @property
    def queries_per_kv_head(self) -> int:
        """Query heads that share one key/value head, ``H / H_kv``."""
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_dict(cls, cfg: dict, source: str = "the config") -> "Qwen2Settings":
        """Settings from a ``config.json`` dict (or ``Qwen2Config.to_dict()``)."""
        model_type = cfg.get("model_type")
        if model_type != "qwen2":
            raise ValueError(
                f"{source} describes a {model_type!r} model, not a Qwen2 one: this "
                "implementation reads only model_type 'qwen2' (Qwen2, Qwen2.5).")
        layers = cfg["num_hidden_layers"]
        layer_types = cfg.get("layer_types") or ["full_attention"] * layers
        if cfg.get("use_sliding_window") or set(layer_types) != {"full_attention"}:
            raise ValueError(
                f"{source} turns on sliding-window attention, which this "
                "implementation leaves out; set use_sliding_window to false.")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ValueError(
                f"{source} uses rope_type {rope_type!r}; only the default (unscaled) "
                "rotary embedding is implemented.")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"{source} uses hidden_act {cfg['hidden_act']!r}; Qwen2's "
                             "MLP is SwiGLU, hidden_act 'silu'.")
        heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        if heads % kv_heads:
            raise ValueError(f"{source}: num_attention_heads ({heads}) must be a "
                             f"multiple of num_key_value_heads ({kv_heads}).")
        eos = cfg.get("eos_token_id")
        eos = () if eos is None else tuple(eos if isinstance(eos, list) else [eos])
        return cls(
            vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"], num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=kv_heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0))),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_position_embeddings=cfg.get("max_position_embeddings", 32768),
            eos_token_id=eos,
        )


# ------------------------------------------------------------------ the blocks, each


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    r"""RMSNorm (Zhang & Sennrich, 2019): scale each vector by its root mean square.

    .. math:: \mathrm{RMSNorm}(x) = w \odot \frac{x}{\sqrt{\frac{1}{D}\sum_i x_i^2
              + \epsilon_{\mathrm{norm}}}}

    No mean is subtracted and there is no bias (unlike LayerNorm); ``eps`` is
    :math:`\epsilon_{\mathrm{norm}}`, ``rms_norm_eps`` in the config. As in Qwen2, the
    statistic is computed in float32 and the result cast back before the scale ``w``.
    ``x``: ``[..., D]``, ``weight``: ``[D]``. Returns ``[..., D]``.
    """
    dtype = x.dtype
    x = x.float()  # [..., D]
    x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)  # [..., D]
    return weight * x.to(dtype)


def rope_cos_sin(positions: Tensor, head_dim: int, theta: float,
                 dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    r"""Rotary embedding angles (Su et al., 2021, RoFormer) for integer positions.

    Pair ``i`` of a head's ``d`` dimensions turns at frequency
    :math:`\omega_i = \theta_{\mathrm{rope}}^{-2i/d}` (``theta``), so a token at
    position :math:`n` gets the angle :math:`n\,\omega_i`. Qwen2 pairs dimension
    ``i`` with ``i + d/2``, hence the two copies. ``positions``: ``[B, T]``
    (``cumsum(mask) - 1`` under left padding).
    Returns ``cos, sin``, each ``[B, T, d]``, computed in float32, cast to ``dtype``.
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32,
                             device=positions.device) / head_dim  # [d/2]
    inv_freq = 1.0 / (theta ** exponents)  # [d/2] omega_i
    angles = positions[..., None].float() * inv_freq  # [B, T, d/2]
    angles = torch.cat([angles, angles], dim=-1)  # [B, T, d]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last dimension (halves of size ``d/2``)."""
    x1, x2 = x.chunk(2, dim=-1)  # [..., d/2] each
    return torch.cat([-x2, x1], dim=-1)  # [..., d]


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    r"""Rotate each pair :math:`(x_i, x_{i+d/2})` by its angle :math:`n\,\omega_i`:

    .. math:: \mathrm{RoPE}(x)_n = x \odot \cos(n\omega) + \mathrm{rotate\_half}(x)
              \odot \sin(n\omega)

    Applied to queries and keys, it makes :math:`q_n^\top k_{n'}` depend on positions
    only through :math:`n - n'`. ``x``: ``[B, heads, T, d]``;
    ``cos, sin``: ``[B, T, d]``.
    """
    cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, d] shared by all heads
    return x * cos + rotate_half(x) * sin


def attention_allowed(key_mask: Tensor, num_queries: int) -> Tensor:
    r"""Which keys each query may attend to: causal and not padding.

    The queries are the last ``T = num_queries`` of the ``S`` columns of ``key_mask``
    (``[B, S]``, 1 = real token, 0 = left padding). Query ``t`` sits in column
    ``S - T + t`` and sees key ``j`` iff :math:`j \le S - T + t` and
    ``key_mask[j] = 1``.
    Returns a bool tensor ``[B, 1, T, S]`` (one mask shared by all heads).
    """
    S = key_mask.shape[1]
    cols = torch.arange(S, device=key_mask.device)  # [S]
    causal = cols[None, :] <= cols[S - num_queries:, None]  # [T, S]
    return causal[None, None] & key_mask.bool()[:, None, None, :]  # [B, 1, T, S]


def grouped_query_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor) -> Tensor:
    r"""Scaled dot-product attention (Vaswani et al., 2017) with grouped-query heads
    (Ainslie et al., 2023, GQA):

    .. math:: \mathrm{Attn}(Q, K, V) = \mathrm{softmax}\!\Big(\frac{QK^\top}{\sqrt{d}}
              + M\Big) V, \qquad M_{tj} = 0 \text{ if allowed else } -\infty

    Each group of ``H / H_kv`` consecutive query heads shares one key/value head, so
    the cache holds ``H_kv`` heads instead of ``H``. A forbidden score gets the most
    negative float (not ``-inf``): a padding query that may see nothing averages
    uniformly instead of producing NaN. The softmax runs in float32.
    ``q``: ``[B, H, T, d]``; ``k, v``: ``[B, H_kv, S, d]``;
    ``allowed``: ``[B, 1, T, S]``.
    Returns ``[B, H, T, d]``.
    """
    B, H, T, d = q.shape
    kv_heads, S = k.shape[1], k.shape[2]
    q = q.reshape(B, kv_heads, (H // kv_heads) * T, d)  # [B, H_kv, H/H_kv * T, d]
    scores = (q @ k.transpose(-1, -2)) * d ** -0.5  # [B, H_kv, H/H_kv * T, S]
    scores = scores.view(B, H, T, S)  # [B, H, T, S]
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(v.dtype)
    out = weights.view(B, kv_heads, -1, S) @ v  # [B, H_kv, H/H_kv * T, d]
    return out.view(B, H, T, d)


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor) -> Tensor:
    """:func:`grouped_query_attention` computed by torch's fused kernel
    (``F.scaled_dot_product_attention``), as ``transformers`` does by default.

    Same formula, different summation order: the two agree to float32 round-off. A
    padding query that may see nothing gets zeros. In a decode step (``T = 1``) the
    ``H / H_kv`` query heads that share a key/value head become that many query rows
    against it, so the keys are never copied; with ``T > 1`` each key/value head is
    repeated ``H / H_kv`` times. Shapes as in :func:`grouped_query_attention`.
    """
    B, H, T, d = q.shape
    kv_heads = k.shape[1]
    if T == 1:
        q = q.reshape(B, kv_heads, H // kv_heads, d)  # [B, H_kv, H/H_kv, d]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return out.reshape(B, H, 1, d)
    k = k.repeat_interleave(H // kv_heads, dim=1)  # [B, H, S, d]
    v = v.repeat_interleave(H // kv_heads, dim=1)  # [B, H, S, d]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)  # [B, H, T, d]


#: ``attn_implementation`` -> the attention function (the names ``transformers`` uses)
ATTENTION_FUNCTIONS = {"eager": grouped_query_attention, "sdpa": sdpa_attention}


def swiglu(x: Tensor, gate: nn.Linear, up: nn.Linear, down: nn.Linear) -> Tensor:
    r"""The SwiGLU feed-forward block (Shazeer, 2020):

    .. math:: \mathrm{SwiGLU}(x) = W_{\mathrm{down}}\big(\mathrm{SiLU}(W_{\mathrm{gate}}
              x) \odot W_{\mathrm{up}} x\big), \qquad \mathrm{SiLU}(z) = z\,\sigma(z)

    ``x``: ``[..., D]`` -> ``[..., F]`` (gate and up) -> ``[..., D]``. No biases.
    """
    return down(F.silu(gate(x)) * up(x))


# -------------------------------------------------------- the modules (HF's names)


class RMSNorm(nn.Module):
    """:func:`rms_norm` with its learned scale ``weight`` ``[D]`` (initialised to 1)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)


class MLP(nn.Module):
    """:func:`swiglu` with its three bias-free projections."""

    def __init__(self, s: Qwen2Settings):
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return swiglu(x, self.gate_proj, self.up_proj, self.down_proj)


class Attention(nn.Module):
    """Project to queries, keys and values (with bias), rotate, attend, project back.

    With a ``cache``, the new keys and values are written into it at column ``start``
    and attention reads every column up to the last one written.
    """

    def __init__(self, s: Qwen2Settings, layer_index: int, attn_implementation: str):
        super().__init__()
        d, H, H_kv = s.head_dim, s.num_attention_heads, s.num_key_value_heads
        self.q_proj = nn.Linear(s.hidden_size, H * d, bias=True)
        self.k_proj = nn.Linear(s.hidden_size, H_kv * d, bias=True)
        self.v_proj = nn.Linear(s.hidden_size, H_kv * d, bias=True)
        self.o_proj = nn.Linear(H * d, s.hidden_size, bias=False)
        self.head_dim, self.layer_index = d, layer_index
        self.attend = ATTENTION_FUNCTIONS[attn_implementation]

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, allowed: Tensor,
                cache: "StaticKVCache | None" = None, start: int = 0) -> Tensor:
        B, T, _ = x.shape  # x: [B, T, D]
        q = self.q_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # [B, H, T, d]
        k = self.k_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # [B,H_kv,T,d]
        v = self.v_proj(x).view(B, T, -1, self.head_dim).transpose(1, 2)  # [B,H_kv,T,d]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:  # [B, H_kv, start + T, d] views of the buffers
            k, v = cache.write(self.layer_index, k, v, start)
        out = self.attend(q, k, v, allowed)  # [B, H, T, d]
        return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))  # [B, T, D]


class DecoderLayer(nn.Module):
    r"""One pre-norm layer: :math:`h = x + \mathrm{Attn}(\mathrm{RMSNorm}(x))`,
    :math:`y = h + \mathrm{SwiGLU}(\mathrm{RMSNorm}(h))`."""

    def __init__(self, s: Qwen2Settings, layer_index: int, attn_implementation: str):
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = Attention(s, layer_index, attn_implementation)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.mlp = MLP(s)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, allowed: Tensor,
                cache: "StaticKVCache | None" = None, start: int = 0) -> Tensor:
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed, cache, start)
        return h + self.mlp(self.post_attention_layernorm(h))  # [B, T, D]


class Qwen2Body(nn.Module):
    """Token embedding, the decoder layers and the final norm (HF's ``model.*``)."""

    def __init__(self, s: Qwen2Settings, attn_implementation: str):
        super().__init__()
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(s, i, attn_implementation)
                                    for i in range(s.num_hidden_layers))
        self.norm = RMSNorm(s.hidden_size, s.rms_norm_eps)


class Qwen2(nn.Module):
    """The causal language model: parameter names as in ``Qwen2ForCausalLM``
    (``model.layers.0.self_attn.q_proj.weight``, ...), so its ``state_dict`` loads from
    a Hugging Face checkpoint and back. With tied embeddings there is no ``lm_head``:
    the logits are :math:`z = h E^\\top` with the embedding matrix ``E``.
    """

    def __init__(self, settings: Qwen2Settings, attn_implementation: str = "sdpa"):
        super().__init__()
        if attn_implementation not in ATTENTION_FUNCTIONS:
            raise ValueError(
                f"attn_implementation must be one of {list(ATTENTION_FUNCTIONS)}, "
                f"got {attn_implementation!r}.")
        self.settings = settings
        self.model = Qwen2Body(settings, attn_implementation)
        D, V = settings.hidden_size, settings.vocab_size
        self.lm_head = (None if settings.tie_word_embeddings
                        else nn.Linear(D, V, bias=False))
        eos = list(settings.eos_token_id)
        self.generation_config = SimpleNamespace(eos_token_id=eos or None)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                position_ids: Tensor | None = None,
                cache: "StaticKVCache | None" = None, start: int = 0,
                last_only: bool = False) -> Tensor:
        """Logits ``[B, T, V]`` (``[B, 1, V]`` with ``last_only``) for ``input_ids``
        ``[B, T]`` placed at columns ``start .. start + T - 1``.

        ``attention_mask``: ``[B, start + T]``, 1 = real token, over every column so far
        (all ones if omitted). ``position_ids``: ``[B, T]``; by default
        ``cumsum(mask) - 1``, which skips left padding (``transformers`` defaults to
        ``0..T-1`` instead: pass them explicitly when comparing padded batches).
        ``cache``/``start``: write this chunk's keys and values into a
        :class:`StaticKVCache` at column ``start`` and attend to all earlier columns.
        """
        s, (B, T) = self.settings, input_ids.shape
        if start and cache is None:
            raise ValueError(f"start={start} needs a cache holding the first {start} "
                             "columns; pass cache=StaticKVCache(...).")
        if attention_mask is None:
            attention_mask = torch.ones(B, start + T, dtype=torch.long,
                                        device=input_ids.device)
        if attention_mask.shape != (B, start + T):
            raise ValueError(
                f"attention_mask has shape {tuple(attention_mask.shape)}; expected "
                f"{(B, start + T)} (batch, cached columns + new tokens).")
        if position_ids is None:
            position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)[:, start:]
        x = self.model.embed_tokens(input_ids)  # [B, T, D]
        cos, sin = rope_cos_sin(position_ids, s.head_dim, s.rope_theta, x.dtype)
        allowed = attention_allowed(attention_mask, T)  # [B, 1, T, start + T]
        for layer in self.model.layers:
            x = layer(x, cos, sin, allowed, cache, start)  # [B, T, D]
        x = self.model.norm(x[:, -1:] if last_only else x)  # [B, T, D]
        head = self.model.embed_tokens if self.lm_head is None else self.lm_head
        return F.linear(x, head.weight)  # [B, T, V]

    @classmethod
    def from_transformers(cls, hf_model, share_weights: bool = False,
                          attn_implementation: str | None = None) -> "Qwen2":
        """Build from a loaded ``transformers`` Qwen2 model: copy its weights, or with
        ``share_weights`` use the very same tensors (an update to one is seen by both).
        The attention implementation defaults to the model's own (eager or sdpa).
        """
        if attn_implementation is None:
            attn_implementation = getattr(hf_model.config, "_attn_implementation", None)
            if attn_implementation not in ATTENTION_FUNCTIONS:
                attn_implementation = "sdpa"
        settings = Qwen2Settings.from_dict(hf_model.config.to_dict(),
                                           source="the model's config")
        state = hf_model.state_dict()
        if not share_weights:
            state = {name: t.detach().clone() for name, t in state.items()}
        model = _assemble(settings, state, None, None, "the model", attn_implementation)
        generation_config = getattr(hf_model, "generation_config", None)
        eos = getattr(generation_config, "eos_token_id", None)
        if eos is not None:
            model.generation_config.eos_token_id = eos
        return model


# ---------------------------------------------------------------------- the KV cache


class StaticKVCache:
    """Preallocated keys and values: per layer one buffer each, ``[B, H_kv, max_len,
    d]``, written in place.

    Column ``c`` holds the key/value of the token in column ``c`` of the (left-padded)
    sequence. :meth:`write` copies a chunk into its columns and returns views of every
    column written so far; nothing is concatenated or reallocated while decoding.
    Memory: ``2 * L * B * H_kv * max_len * d`` numbers (:attr:`nbytes`).
    """

    def __init__(self, settings: Qwen2Settings, batch_size: int, max_len: int,
                 dtype: torch.dtype = torch.float32, device=None):
        shape = (batch_size, settings.num_key_value_heads, max_len, settings.head_dim)
        layers = range(settings.num_hidden_layers)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in layers]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in layers]
        self.max_len = max_len

    def write(self, layer: int, k: Tensor, v: Tensor,
              start: int) -> tuple[Tensor, Tensor]:
        """Store ``k, v`` ``[B, H_kv, T, d]`` at columns ``start .. start + T - 1`` of
        ``layer``; return the views ``[B, H_kv, start + T, d]`` of columns ``0 ..
        start + T - 1``."""
        end = start + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"the cache holds {self.max_len} columns; writing columns "
                             f"{start}..{end - 1} overflows it. Allocate a larger one.")
        self.keys[layer][:, :, start:end] = k  # in place
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    @property
    def nbytes(self) -> int:
        """Bytes held by all the buffers."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


# --------------------------------------------------------------------------- loading


def _read_safetensors(folder: Path) -> dict[str, Tensor]:
    """All tensors of ``model.safetensors`` or of the shards that
    ``model.safetensors.index.json`` names."""
    from safetensors.torch import load_file

    single = folder / "model.safetensors"
    index = folder / "model.safetensors.index.json"
    if single.is_file():
        return load_file(str(single))
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state = {}
        for shard in shards:
            state.update(load_file(str(folder / shard)))
        return state
    raise FileNotFoundError(
        f"No weights in {folder}: expected model.safetensors (or "
        "model.safetensors.index.json with its shards).")


def _assemble(settings: Qwen2Settings, state: dict[str, Tensor], dtype, device,
              source: str, attn_implementation: str) -> Qwen2:
    """A :class:`Qwen2` whose parameters are the tensors of ``state`` (same names),
    cast to ``dtype`` and moved to ``device`` (``None``: kept as they are)."""
    with torch.device("meta"):  # no random initialisation: every weight is replaced
        model = Qwen2(settings, attn_implementation)
    expected = dict(model.state_dict())
    if settings.tie_word_embeddings:
        state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"{source} does not match the Qwen2 layout: missing {missing[:3]}"
            f"{'...' if len(missing) > 3 else ''}, unexpected {unexpected[:3]}"
            f"{'...' if len(unexpected) > 3 else ''}.")
    for name, meta in expected.items():
        if state[name].shape != meta.shape:
            raise ValueError(f"{source}: {name} has shape {tuple(state[name].shape)}, "
                             f"the config implies {tuple(meta.shape)}.")
    state = {k: v.to(dtype=dtype or v.dtype, device=device or v.device)
             for k, v in state.items()}
    model.load_state_dict(state, assign=True)
    return model.eval()


def load_qwen2(path: str | Path, dtype: torch.dtype = torch.float32,
               device: str | torch.device = "cpu",
               attn_implementation: str = "sdpa") -> Qwen2:
    """Load a Hugging Face Qwen2 checkpoint folder (``config.json``, safetensors) into
    :class:`Qwen2`, every weight cast to ``dtype`` (float32 by default, whatever the
    file stores). Reads ``generation_config.json`` for the stop tokens when present.
    ``attn_implementation``: ``"sdpa"`` (torch's fused kernel, as ``transformers``
    by default) or ``"eager"`` (:func:`grouped_query_attention`, the formula)."""
    folder = Path(path)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise FileNotFoundError(
            f"No model at {folder}: config.json is missing (expected a Hugging Face "
            "model folder with config.json and model.safetensors).")
    cfg = json.loads(config_file.read_text())
    settings = Qwen2Settings.from_dict(cfg, source=str(config_file))
    model = _assemble(settings, _read_safetensors(folder), dtype, torch.device(device),
                      str(folder), attn_implementation)
    gen_file = folder / "generation_config.json"
    if gen_file.is_file():
        eos = json.loads(gen_file.read_text()).get("eos_token_id")
        if eos is not None:
            model.generation_config.eos_token_id = eos
    return model


# -------------------------------------------------------------------------- decoding


def decode_static(model: Qwen2, ids: Tensor, mask: Tensor, *, max_new_tokens: int,
                  temperature: float = 1.0, top_p: float = 1.0, do_sample: bool = True,
                  generator: torch.Generator | None = None, stop_ids: Sequence[int],
                  pad_id: int, ignore_eos: bool = False, use_cache: bool = True):
    """The decode loop over a static cache for left-padded prompts ``ids, mask [b, P]``.

    One cache of ``P + max_new_tokens`` columns and one attention mask of that width
    are allocated up front. Prefill writes columns ``0 .. P-1``; decode step ``t``
    feeds one token per row into column ``P + t``. Tokens are chosen by
    :func:`grpo_lib.sampling.next_token` (greedy, or temperature and top-p). A row that
    emitted a stop token emits ``pad_id`` from then on, with mask 0. Returns
    ``(completion_ids [b, C], completion_mask [b, C], finished [b])``,
    ``C <= max_new_tokens``, like :func:`grpo_lib.sampling.decode_batch`. Call it
    under ``torch.inference_mode()``, as :func:`generate_static` does.
    (``use_cache`` exists only so that it is called like ``decode_batch``.)
    """
    if not use_cache:
        raise ValueError("decode_static always decodes over its static cache; for "
                         "use_cache=False use grpo_lib.sampling.decode_batch.")
    (b, P), device = ids.shape, ids.device
    dtype = model.model.embed_tokens.weight.dtype
    cache = StaticKVCache(model.settings, b, P + max_new_tokens, dtype, device)
    full_mask = torch.zeros(b, P + max_new_tokens, dtype=torch.long, device=device)
    full_mask[:, :P] = mask  # [b, P + max_new_tokens]; decode columns set to 1 below
    stop = torch.tensor(list(stop_ids), device=device)  # [S]
    finished = torch.zeros(b, dtype=torch.bool, device=device)  # [b]
    tokens, alive = [], []  # C x [b]
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)  # [b, P]
    logits = model(ids, mask, positions, cache=cache, start=0, last_only=True)[:, -1]
    position = positions[:, -1:]  # [b, 1]
    for step in range(max_new_tokens):
        token = next_token(logits, temperature, top_p, do_sample, generator)  # [b]
        token = torch.where(finished, torch.full_like(token, pad_id), token)
        alive.append(~finished)
        tokens.append(token)
        if not ignore_eos:
            finished = finished | torch.isin(token, stop)
            if bool(finished.all()):
                break
        if step == max_new_tokens - 1:
            break
        column = P + step
        full_mask[:, column] = 1
        position = position + 1  # [b, 1]
        logits = model(token[:, None], full_mask[:, :column + 1], position,
                       cache=cache, start=column, last_only=True)[:, -1]  # [b, V]
    completion = torch.stack(tokens, dim=1)  # [b, C]
    return completion, torch.stack(alive, dim=1).long(), finished


def generate_static(model: Qwen2, tokenizer, prompts: Sequence,
                    num_generations: int = 1, max_new_tokens: int = 64,
                    temperature: float = 1.0, top_p: float = 1.0,
                    do_sample: bool = True,
                    batch_size: int | None = None, seed: int | None = None, *,
                    stop_token_ids: Sequence[int] | None = None,
                    ignore_eos: bool = False) -> Rollout:
    """:func:`grpo_lib.sampling.generate` with the from-scratch model and its static
    cache: the same arguments, the same :class:`~grpo_lib.sampling.Rollout` (prompts
    rendered and left-padded the same way, rows group-major, stop at a stop token).
    Only the decode loop differs: :func:`decode_static`."""
    return generate(model, tokenizer, prompts, num_generations, max_new_tokens,
                    temperature, top_p, do_sample, batch_size, seed,
                    stop_token_ids=stop_token_ids, ignore_eos=ignore_eos,
                    decode_fn=decode_static)


# ------------------------------------------------------------- the memory of training


def parameter_count(s: Qwen2Settings) -> int:
    r"""Number of parameters, from the settings alone:

    .. math:: N = V D\,(1 + [\text{untied}]) + L\big(2 D \cdot Hd + Hd
              + 2(D + 1) H_{kv} d + 3 D F + 2 D\big) + D

    (embedding and output layer; per layer the query and output projections, the
    query bias, key and value projections with their biases, the three SwiGLU
    matrices and two norms; the final norm).
    """
    D, F_, d, V = s.hidden_size, s.intermediate_size, s.head_dim, s.vocab_size
    H, H_kv, L = s.num_attention_heads, s.num_key_value_heads, s.num_hidden_layers
    per_layer = 2 * D * H * d + H * d + 2 * (D + 1) * H_kv * d + 3 * D * F_ + 2 * D
    return V * D * (1 if s.tie_word_embeddings else 2) + L * per_layer + D


def activation_bytes(s: Qwen2Settings, batch_size: int, seq_len: int,
                     dtype: torch.dtype = torch.float32,
                     attn_implementation: str = "eager") -> int:
    """Bytes that autograd keeps for the backward pass of one training forward: the
    model over ``[batch_size, seq_len]`` tokens, then each token's log-probability
    (:func:`grpo_lib.logprobs.selective_log_softmax`, as the GRPO loss needs).

    Counted, not estimated: the model is built on PyTorch's ``meta`` device (shapes
    without memory or arithmetic), and every tensor saved for the backward pass is
    counted once per storage (``torch.autograd.graph.saved_tensors_hooks``); the
    weights themselves are left out. On real tensors the same count is what the
    chapter measures.
    """
    from .logprobs import selective_log_softmax

    with torch.device("meta"):
        model = Qwen2(s, attn_implementation).to(dtype).train()
        ids = torch.zeros(batch_size, seq_len, dtype=torch.long)
    return saved_activation_bytes(
        model, lambda: selective_log_softmax(model(ids)[:, :-1], ids[:, 1:]))


def saved_activation_bytes(model: nn.Module, forward) -> int:
    """Bytes of the tensors that ``forward()`` saves for backward, each storage once,
    the parameters of ``model`` excluded. Works on real and on ``meta`` tensors."""
    weights = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in weights:
            saved[storage._cdata] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(saved.values())


def training_memory(s: Qwen2Settings, batch_size: int, seq_len: int,
                    dtype: torch.dtype = torch.float32) -> dict[str, int]:
    r"""Bytes needed to train with AdamW with every tensor in ``dtype``:

    .. math:: \underbrace{N b}_{\text{weights}} + \underbrace{N b}_{\text{gradients}}
              + \underbrace{2 N b}_{\text{Adam } m,\ v} + \text{activations}

    with ``b`` bytes per number (4 in float32: 16 bytes per parameter before a single
    activation). ``torch.optim.AdamW`` keeps its two moments in the parameters' dtype.
    Activations from :func:`activation_bytes` for one micro-batch of
    ``batch_size x seq_len`` tokens.
    """
    N, b = parameter_count(s), torch.finfo(dtype).bits // 8
    parts = {"weights": N * b, "gradients": N * b, "adam_states": 2 * N * b,
             "activations": activation_bytes(s, batch_size, seq_len, dtype)}
    return {**parts, "total": sum(parts.values())}


# ------------------------------------------------- the sampler's own log-probabilities


def rollout_logprobs(model: Qwen2, prompt_ids: Tensor, prompt_mask: Tensor,
                     completion_ids: Tensor, temperature: float = 1.0) -> Tensor:
    r"""The log-probabilities that the sampler's numerics give the completion tokens:

    .. math:: \ell^{\mathrm{roll}}_{b,j} = \log\mathrm{softmax}(z^{\mathrm{roll}}_{b,j}
              / \tau)[c_{b,j}]

    with :math:`z^{\mathrm{roll}}_{b,j}` computed exactly as :func:`decode_static`
    computes it while sampling (one prefill, then one token per step over the static
    cache, in the model's dtype), the given tokens fed back instead of sampled ones.
    The trainer's :math:`\ell_{b,j}` (:func:`grpo_lib.logprobs.sequence_logprobs`)
    runs the whole sequence at once, possibly in another dtype; the gap
    :math:`\ell_{b,j} - \ell^{\mathrm{roll}}_{b,j}` is the log of the importance ratio
    that corrects for the mismatch. ``prompt_ids, prompt_mask``: ``[B, P]``
    left-padded; ``completion_ids``: ``[B, C]``. Returns ``[B, C]`` float32 (values
    after a row's stop token are meaningless: mask them).
    """
    (B, P), C = prompt_ids.shape, completion_ids.shape[1]
    dtype = model.model.embed_tokens.weight.dtype
    cache = StaticKVCache(model.settings, B, P + C, dtype, prompt_ids.device)
    mask = torch.cat([prompt_mask, torch.ones_like(completion_ids)], dim=1)  # [B, P+C]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, P + C]
    out = []
    with torch.inference_mode():
        logits = model(prompt_ids, prompt_mask, positions[:, :P], cache=cache, start=0,
                       last_only=True)[:, -1]  # [B, V]
        for j in range(C):
            logp = torch.log_softmax(logits.float() / temperature, dim=-1)  # [B, V]
            out.append(logp.gather(-1, completion_ids[:, j:j + 1]))  # [B, 1]
            if j < C - 1:
                col = P + j
                logits = model(completion_ids[:, j:j + 1], mask[:, :col + 1],
                               positions[:, col:col + 1], cache=cache, start=col,
                               last_only=True)[:, -1]  # [B, V]
    return torch.cat(out, dim=1).clone()  # [B, C]
