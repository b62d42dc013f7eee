r"""Log-probs of a group's completions with their shared prompt computed once.

The G completions of a GRPO group continue the same prompt. In a causal LM nothing at
a prompt position depends on what follows it, so the prompt's hidden states, keys and
values are identical in the G rows. :func:`grpo_lib.logprobs.sequence_logprobs`
computes them G times, as TRL does; :func:`group_logprobs` computes them once per group
and lets each completion attend to them:

.. math::

    \text{prompt: } h^{(\ell+1)}_p = \mathrm{Layer}_\ell(h^{(\ell)}_p)
    \quad\text{once}, \qquad
    \text{completion } i: \ \mathrm{Attn}\big(q_{c_i}, [k_p; k_{c_i}],
    [v_p; v_{c_i}]\big)

The result is the same function (the log-probs and gradients of
:func:`~grpo_lib.logprobs.sequence_logprobs` to round-off; autograd sums the G rows'
gradients into the shared prompt), with :math:`(G-1)/G` of the prompt's work removed:
for prompts of :math:`P` tokens and completions of :math:`C`, a share
:math:`\frac{(G-1)P}{G(P+C)}` of the forward and backward of the layers.

It reads the weights by their Hugging Face names (``model.layers.0.self_attn.q_proj``,
...), so the same function runs on a ``transformers.Qwen2ForCausalLM`` (the policy
itself: the gradients land in its parameters) and on :class:`grpo_lib.qwen2.Qwen2`.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .logprobs import entropy_from_logits, selective_log_softmax
from .packed_linear import linear as packed_linear
from .qwen2 import (ATTENTION_FUNCTIONS, Qwen2, Qwen2Settings, attention_allowed,
                    rms_norm, rope_cos_sin, rotate_half)

__all__ = ["group_logprobs", "prompt_share"]


def prompt_share(P: int, C: int, G: int) -> float:
    r"""The share of the layers' token work that :func:`group_logprobs` removes:
    :math:`\frac{(G-1)P}{G(P+C)}`."""
    return (G - 1) * P / (G * (P + C))


def _settings(model) -> Qwen2Settings:
    if isinstance(model, Qwen2):
        return model.settings
    return Qwen2Settings.from_dict(model.config.to_dict(), source="the model's config")


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """:func:`grpo_lib.qwen2.apply_rope` for token-major ``x`` ``[T, heads, d]``
    (``cos, sin``: ``[T, 1, d]``)."""
    return x * cos + rotate_half(x) * sin


def group_logprobs(model, prompt_ids: Tensor, prompt_mask: Tensor,
                   completion_ids: Tensor, completion_mask: Tensor,
                   temperature: float = 1.0, return_entropy: bool = False,
                   attention: str | None = None, packed: bool = True):
    """Per-token log-probs ``[N G, C]`` of the completions, as
    :func:`grpo_lib.logprobs.sequence_logprobs` returns them, from one prompt row per
    group.

    ``prompt_ids, prompt_mask``: ``[N, P]``, left-padded, one row per group;
    ``completion_ids, completion_mask``: ``[N G, C]``, group-major (rows
    ``gG .. gG + G - 1`` continue prompt ``g``). Returns ``logp`` (0 where the mask is
    0), or ``(logp, entropy)``.

    ``attention``: ``"sdpa"`` (torch's fused kernel) or ``"eager"`` (the formula,
    :func:`grpo_lib.qwen2.grouped_query_attention`); by default the fused kernel,
    except in bfloat16 on a CPU, where its backward pass is several times slower than
    the formula's at this book's sizes (chapter 19 measures it).

    ``packed``: multiply by the weights through oneDNN's packed copies where that
    applies (float32 on a CPU, :mod:`grpo_lib.packed_linear`); the same results to
    round-off, faster.
    """
    (N, P), (rows, C) = prompt_ids.shape, completion_ids.shape
    if N == 0 or rows % N:
        raise ValueError(f"{rows} completion rows for {N} prompts: pass one prompt "
                         f"row per group and G completions per prompt, group-major.")
    if not (prompt_mask[:, -1] == 1).all():
        raise ValueError("prompts must be left-padded: the last prompt column is the "
                         "token that predicts the first completion token.")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}.")
    if attention not in (None, *ATTENTION_FUNCTIONS):
        raise ValueError(f"attention={attention!r}; choose one of "
                         f"{sorted(ATTENTION_FUNCTIONS)}.")
    s, G, body = _settings(model), rows // N, model.model
    d, eps = s.head_dim, s.rms_norm_eps
    prompt_mask, completion_mask = prompt_mask.long(), completion_mask.long()
    pos_p = (prompt_mask.cumsum(-1) - 1).clamp(min=0)  # [N, P]
    pos_c = (prompt_mask.sum(-1).repeat_interleave(G)[:, None]
             + completion_mask.cumsum(-1) - 1).clamp(min=0)  # [N G, C]
    keys_c = torch.cat([prompt_mask.repeat_interleave(G, 0), completion_mask], 1)
    allowed_p = attention_allowed(prompt_mask, P)  # [N, 1, P, P]
    allowed_c = attention_allowed(keys_c, C)  # [N G, 1, C, P + C]
    dtype = body.embed_tokens.weight.dtype
    cos_p, sin_p = rope_cos_sin(pos_p, d, s.rope_theta, dtype)  # [N, P, d]
    cos_c, sin_c = rope_cos_sin(pos_c, d, s.rope_theta, dtype)  # [N G, C, d]
    cos = torch.cat([cos_p.reshape(-1, d), cos_c.reshape(-1, d)])[:, None]  # [T,1,d]
    sin = torch.cat([sin_p.reshape(-1, d), sin_c.reshape(-1, d)])[:, None]
    # every token of the batch once, the prompts' first: T = N P + N G C rows
    x = body.embed_tokens(torch.cat([prompt_ids.flatten(), completion_ids.flatten()]))
    NP = N * P
    if attention is None:
        attention = "eager" if x.dtype == torch.bfloat16 and x.is_cpu else "sdpa"
    attend = ATTENTION_FUNCTIONS[attention]
    product = packed_linear if packed else F.linear

    def lin(layer, inputs):  # layer(inputs), by its weights if a plain nn.Linear
        if packed and type(layer) is torch.nn.Linear:
            return packed_linear(inputs, layer.weight, layer.bias)
        return layer(inputs)

    for layer in body.layers:
        a, m = layer.self_attn, layer.mlp
        h = rms_norm(x, layer.input_layernorm.weight, eps)  # [T, D]
        q = rope(lin(a.q_proj, h).view(len(h), -1, d), cos, sin)  # [T, H, d]
        k = rope(lin(a.k_proj, h).view(len(h), -1, d), cos, sin)  # [T, H_kv, d]
        v = lin(a.v_proj, h).view(len(h), -1, d)  # [T, H_kv, d]
        q_p, k_p, v_p = (t[:NP].view(N, P, -1, d).transpose(1, 2) for t in (q, k, v))
        q_c, k_c, v_c = (t[NP:].view(rows, C, -1, d).transpose(1, 2)
                         for t in (q, k, v))  # [N G, heads, C, d]
        out_p = attend(q_p, k_p, v_p, allowed_p)  # [N, H, P, d]
        k_all = torch.cat([k_p.repeat_interleave(G, 0), k_c], 2)  # [N G, H_kv, P+C, d]
        v_all = torch.cat([v_p.repeat_interleave(G, 0), v_c], 2)
        out_c = attend(q_c, k_all, v_all, allowed_c)  # [N G, H, C, d]
        out = torch.cat([out_p.transpose(1, 2).reshape(NP, -1),
                         out_c.transpose(1, 2).reshape(rows * C, -1)])  # [T, H d]
        x = x + lin(a.o_proj, out)
        h = rms_norm(x, layer.post_attention_layernorm.weight, eps)
        gated = F.silu(lin(m.gate_proj, h)) * lin(m.up_proj, h)  # [T, F]
        x = x + lin(m.down_proj, gated)  # [T, D]
    # the prompt's last position predicts c_0; completion position j-1 predicts c_j
    last = x[:NP].view(N, P, -1)[:, -1:].repeat_interleave(G, 0)  # [N G, 1, D]
    h = torch.cat([last, x[NP:].view(rows, C, -1)[:, :-1]], 1)  # [N G, C, D]
    h = rms_norm(h, body.norm.weight, eps)
    head = getattr(model, "lm_head", None)
    logits = product(h, body.embed_tokens.weight if head is None else head.weight)
    if temperature != 1.0:
        logits = logits / temperature  # [N G, C, V]
    mask = completion_mask.bool()
    logp = selective_log_softmax(logits, completion_ids).masked_fill(~mask, 0.0)
    if return_entropy:
        return logp, entropy_from_logits(logits).masked_fill(~mask, 0.0)
    return logp
