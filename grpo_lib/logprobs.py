"""Per-token log-probabilities of completions under a causal LM: the shift, done once.

A causal LM's logits at position ``t`` are its prediction for the token at ``t + 1``.
GRPO needs ``log pi(o_t | q, o_<t)`` for every completion token ``o_t``; this module
computes them from ``[prompt | completion]`` with the alignment spelled out, in a way
that does not materialise a full ``[B, T, V]`` log-softmax (at Qwen's vocabulary of
151,936 that tensor is the largest thing in memory).
"""
from __future__ import annotations

import inspect
from typing import Sequence

import torch
import torch.nn.functional as F


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., index]`` without building the full log-softmax.

    .. math::

        \\log p_{b,t}(i) = z_{b,t,i} - \\log\\sum_{v=1}^{V} e^{z_{b,t,v}}

    For float32/float64 the selected logit is gathered (``[B, T]``) and the logsumexp
    is taken one row ``b`` at a time, so the extra memory is ``O(T V)`` for one row
    instead of ``O(B T V)``. For bfloat16/float16 the subtraction ``z - logsumexp``
    loses too much precision, so each row gets its own ``log_softmax`` (still one row at
    a time) — the same strategy as ``trl.trainer.utils.selective_log_softmax``.

    Args:
        logits: ``[B, T, V]`` (or ``[T, V]``) unnormalised scores.
        index: ``[B, T]`` (or ``[T]``) token ids, int64, with ``0 <= index < V``.

    Returns:
        ``[B, T]`` (or ``[T]``) log-probabilities of the indexed tokens.
    """
    if logits.shape[:-1] != index.shape:
        raise ValueError(
            f"index must have the shape of logits without the vocabulary dimension: "
            f"logits {tuple(logits.shape)} needs index {tuple(logits.shape[:-1])}, got "
            f"{tuple(index.shape)}. Did you forget the causal shift (logits[:, :-1] vs "
            f"ids[:, 1:])?"
        )
    if logits.ndim == 2:  # [T, V] -> treat as one row
        return selective_log_softmax(logits.unsqueeze(0), index.unsqueeze(0)).squeeze(0)
    index = index.long()
    if logits.dtype in (torch.float32, torch.float64):
        selected = logits.gather(-1, index.unsqueeze(-1)).squeeze(-1)  # [B, T]
        # One row at a time keeps the temporary exp() buffer at [T, V], not [B, T, V].
        lse = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])  # [B, T]
        return selected - lse  # [B, T]
    rows = []
    for row_logits, row_index in zip(logits, index):  # [T, V], [T]
        row_logp = F.log_softmax(row_logits, dim=-1)  # [T, V]
        rows.append(row_logp.gather(-1, row_index.unsqueeze(-1)).squeeze(-1))  # [T]
        # Free this row now: otherwise it stays alive while the next row's log_softmax
        # is allocated, and the peak is two [T, V] rows instead of one.
        del row_logp
    return torch.stack(rows)  # [B, T]


def entropy_from_logits(logits: torch.Tensor, chunk_size: int = 128) -> torch.Tensor:
    """Entropy (nats) of the softmax distribution at every position, in chunks of rows.

    .. math::

        H = -\\sum_v p_v \\log p_v = \\log\\sum_v e^{z_v} - \\sum_v p_v z_v

    Args:
        logits: ``[..., V]``.
        chunk_size: rows of the flattened ``[N, V]`` logits processed at once.

    Returns:
        ``[...]`` entropies (the shape of ``logits`` without ``V``).
    """
    flat = logits.reshape(-1, logits.shape[-1])  # [N, V]
    out = []
    for chunk in flat.split(chunk_size, dim=0):  # [n, V]
        logp = F.log_softmax(chunk.float(), dim=-1)  # [n, V]
        out.append(-(logp.exp() * logp).sum(-1))  # [n]
    entropy = torch.cat(out) if out else flat.new_zeros(0, dtype=torch.float32)
    return entropy.reshape(logits.shape[:-1]).to(logits.dtype)  # [...]


def _accepts(model: torch.nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def sequence_logprobs(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
    micro_batch_size: int | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs of the completion tokens given the prompt.

    .. math::

        \\ell_{b,j} = \\log \\pi_\\theta(c_{b,j} \\mid p_b, c_{b,<j})
                    = \\log\\operatorname{softmax}(z_{b,P-1+j} / \\tau)[c_{b,j}]

    The alignment, with ``P`` prompt columns and ``C`` completion columns::

        input_ids   = [p_0 .. p_{P-1} | c_0 .. c_{C-1}]          # [B, P + C]
        logits[:, t] predicts input_ids[:, t + 1]
        logits[:, P-1]     -> c_0      (the last prompt token predicts the first one)
        logits[:, P-1+j]   -> c_j
        logits[:, P+C-1]   -> the token after c_{C-1}: not needed, dropped

    so only the last ``C + 1`` positions are computed (``logits_to_keep=C+1``, which
    skips the LM head on the prompt) and the very last one is dropped.

    ``position_ids = cumsum(attention_mask) - 1`` (clamped at 0): with left-padded
    prompts the first real token gets position 0, exactly as without padding, so the
    log-probs do not depend on how much padding a row carries. The logits are divided by
    the sampling ``temperature`` before the log-softmax (as TRL does) so that the
    log-probs are those of the distribution the tokens were sampled from.

    Args:
        model: a Hugging Face causal LM (``Qwen2ForCausalLM`` or similar).
        prompt_ids: ``[B, P]`` prompt token ids, left-padded.
        prompt_mask: ``[B, P]`` 1 on real prompt tokens, 0 on padding.
        completion_ids: ``[B, C]`` completion token ids, right-padded.
        completion_mask: ``[B, C]`` 1 on real completion tokens (up to and including
            EOS).
        temperature: the sampling temperature ``tau`` (> 0).
        return_entropy: also return the entropy of each position's distribution.
        micro_batch_size: run the model on this many rows at a time (memory), or all.

    Returns:
        ``logp`` ``[B, C]`` — 0 where ``completion_mask`` is 0 — or ``(logp, entropy)``,
        both ``[B, C]``.
    """
    if (prompt_ids.shape != prompt_mask.shape
            or completion_ids.shape != completion_mask.shape):
        raise ValueError(
            f"ids and masks must match: prompt {tuple(prompt_ids.shape)} vs mask "
            f"{tuple(prompt_mask.shape)}, completion {tuple(completion_ids.shape)} vs "
            f"mask {tuple(completion_mask.shape)}."
        )
    if prompt_ids.shape[0] != completion_ids.shape[0]:
        raise ValueError(f"prompt batch {prompt_ids.shape[0]} != completion batch "
                         f"{completion_ids.shape[0]}: pass one prompt row per "
                         f"completion (repeat each prompt G times).")
    if prompt_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: the first completion token needs a "
                         "token before it to be predicted from (add a BOS or the chat "
                         "template).")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}.")
    not_left = (prompt_mask[:, -1] == 0).nonzero().flatten().tolist()
    if not_left:
        raise ValueError(
            f"prompt rows {not_left[:10]} end in padding (prompt_mask[:, -1] == 0): "
            f"prompts must be LEFT-padded, so that the last prompt column is the real "
            f"token that predicts the first completion token. Re-pad them on the left "
            f"(tokenizer.padding_side = 'left')."
        )
    batch, num_completion = completion_ids.shape
    step = micro_batch_size or batch
    if step < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size!r}.")
    keep_arg = _accepts(model, "logits_to_keep")
    device = next(model.parameters()).device

    all_logp, all_entropy = [], []
    for start in range(0, batch, step):
        rows = slice(start, start + step)
        # [b, P+C]: each row's prompt, then its completion
        input_ids = torch.cat([prompt_ids[rows], completion_ids[rows]], dim=1)
        attention_mask = torch.cat([prompt_mask[rows], completion_mask[rows]], dim=1)
        attention_mask = attention_mask.long().to(device)  # [b, P+C]
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)  # [b, P+C]
        kwargs = dict(input_ids=input_ids.to(device), attention_mask=attention_mask,
                      position_ids=position_ids, use_cache=False)
        if keep_arg:
            kwargs["logits_to_keep"] = num_completion + 1
        logits = model(**kwargs).logits  # [b, C+1, V] (or [b, P+C, V] without keep_arg)
        logits = logits[:, -(num_completion + 1):-1, :]  # [b, C, V]: row j predicts c_j
        if temperature != 1.0:
            logits = logits / temperature
        targets = completion_ids[rows].to(device)  # [b, C]
        mask = completion_mask[rows].to(device).bool()  # [b, C]
        logp = selective_log_softmax(logits, targets).masked_fill(~mask, 0.0)  # [b, C]
        all_logp.append(logp)
        if return_entropy:
            entropy = entropy_from_logits(logits).masked_fill(~mask, 0.0)  # [b, C]
            all_entropy.append(entropy)
    logp = torch.cat(all_logp, dim=0)  # [B, C]
    if return_entropy:
        return logp, torch.cat(all_entropy, dim=0)
    return logp


def _render_ids(tokenizer, messages: Sequence[dict],
                add_generation_prompt: bool) -> list[int]:
    """Chat template -> text -> token ids (no extra special tokens: the template has
    them)."""
    if not messages:
        return []
    text = tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return tokenizer.encode(text, add_special_tokens=False)


def assistant_mask(tokenizer,
                   messages: Sequence[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of a chat and a mask that is 1 exactly on the assistant's tokens.

    By incremental tokenization: for each assistant message ``k`` the conversation is
    rendered twice with the chat template, up to message ``k - 1`` with the generation
    prompt (``<|im_start|>assistant\\n``) and up to message ``k``. The tokens the second
    adds to the first are that message's content, its closing ``<|im_end|>`` and the
    template's trailing newline. The mask is 1 on the content and on ``<|im_end|>`` (the
    model must learn to stop) and 0 on the newline and on everything else (system, user,
    role headers), which is what an assistant-only SFT loss needs.

    ``mask[t] = 1`` means token ``t`` is a target; in a causal LM it is predicted by
    ``logits[t - 1]`` (shift the mask with the labels:
    ``labels[t] = ids[t] if mask[t]``).

    Args:
        tokenizer: a tokenizer with a chat template (ChatML here).
        messages: ``[{"role": ..., "content": ...}, ...]``.

    Returns:
        ``(input_ids, mask)``: two 1-D int64 tensors of equal length ``[T]``.
    """
    if not messages:
        raise ValueError("messages is empty: pass a conversation such as "
                         "[{'role': 'user', ...}, {'role': 'assistant', ...}].")
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ValueError(f"message {k} must be a dict with 'role' and 'content', "
                             f"got {m!r}.")
    full = _render_ids(tokenizer, messages, add_generation_prompt=False)  # [T]
    mask = [0] * len(full)
    end_ids = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id}
    end_ids.discard(None)
    end_ids.discard(getattr(tokenizer, "unk_token_id", None))
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = _render_ids(tokenizer, messages[:k], add_generation_prompt=True)
        upto = _render_ids(tokenizer, messages[: k + 1], add_generation_prompt=False)
        if full[: len(upto)] != upto or upto[: len(before)] != before:
            raise ValueError(
                f"the chat template is not prefix-stable at message {k}: rendering the "
                f"conversation up to a message is not a prefix of rendering all of it "
                f"(some templates rewrite earlier turns, e.g. strip old <think> "
                f"blocks). Mask this template by character offsets instead."
            )
        span = range(len(before), len(upto))  # the assistant turn's new tokens
        last_end = max((t for t in span if upto[t] in end_ids), default=None)
        stop = last_end + 1 if last_end is not None else len(upto)
        for t in range(len(before), stop):
            mask[t] = 1
    return torch.tensor(full, dtype=torch.long), torch.tensor(mask, dtype=torch.long)
