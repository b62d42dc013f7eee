"""Rollouts: sample G completions per prompt with a KV cache, temperature and top-p.

GRPO learns from *groups*: for every prompt :math:`q` it samples :math:`G` outputs
:math:`o_1, \\dots, o_G \\sim \\pi_{\\theta_{\\mathrm{old}}}(\\cdot \\mid q)`
(Shao et al., 2024, DeepSeekMath, eq. 3) and compares their rewards with each other.
This module is the sampler that produces those groups. It is a plain autoregressive
decode loop, written out so the book can teach every piece of it:

1. render each prompt (chat template for message lists), tokenise, **left-pad** so that
   every row's last prompt token sits in the same column;
2. repeat each prompt ``num_generations`` times, contiguously
   (``[p0]*G + [p1]*G + ...``);
3. **prefill**: one forward pass over the prompts fills the KV cache; positions are
   ``cumsum(mask) - 1`` so left padding does not shift them;
4. **decode**: one token per step, feeding only the new token and reusing the cache;
   the next token is chosen greedily or sampled after temperature and top-p;
5. **stop** each row at its first stop token (``<|im_end|>``, ``<|endoftext|>``); a
   finished row emits padding that its mask marks 0; the loop ends when every row has
   stopped or ``max_new_tokens`` is reached (those rows are *truncated*).

Greedy decoding here equals ``model.generate(do_sample=False)`` token for token
(``tests/test_sampling.py``); ``benchmarks/sampler_vs_generate.py`` compares speeds.
"""
from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from .models import stop_token_ids

__all__ = [
    "Rollout",
    "generate",
    "decode_batch",
    "cache_kwarg",
    "top_p_filter",
    "next_token",
    "resolve_stop_token_ids",
    "tokenize_prompts",
]


@dataclass
class Rollout:
    """The output of :func:`generate`: a batch of ``B = num_prompts * G`` completions.

    Rows are group-major: rows ``g*G .. g*G + G - 1`` are the ``G`` completions of
    prompt ``g``, so ``rewards.view(-1, G)`` gives one row per group.
    """

    prompt_ids: Tensor       # [B, P] left-padded prompt tokens
    prompt_mask: Tensor      # [B, P] 1 = real prompt token, 0 = left padding
    completion_ids: Tensor   # [B, C] generated tokens, right-padded with the pad id
    completion_mask: Tensor  # [B, C] 1 up to and including the stop token, 0 after
    finished: Tensor         # [B]    True = stopped at a stop token, False = truncated
    texts: list[str]         # B decoded completions, special tokens removed
    prompts: list[str]       # B rendered prompt strings (each repeated G times)
    num_generations: int = 1  # G, the group size
    sampler_logprobs: Tensor | None = None  # [B, C] log-probs of the sampled tokens
    # under the sampler's own numerics (decode loops that return them: decode_fast)

    @property
    def completion_lengths(self) -> Tensor:
        """Number of real completion tokens per row (stop token included). ``[B]``"""
        return self.completion_mask.sum(dim=-1)

    def __len__(self) -> int:
        return self.completion_ids.shape[0]


# ----------------------------------------------------------------------------- helpers


def resolve_stop_token_ids(tokenizer, model=None) -> list[int]:
    """The token ids that end a completion.

    :func:`grpo_lib.models.stop_token_ids` (``<|im_end|>``, ``<|endoftext|>``, the
    tokenizer's EOS) followed by the model's ``generation_config.eos_token_id``, without
    repeats.
    """
    try:
        ids = [int(i) for i in stop_token_ids(tokenizer)]
    except ValueError:  # a tokenizer with none of the known end tokens
        ids = []
    gen_cfg = getattr(model, "generation_config", None)
    eos = getattr(gen_cfg, "eos_token_id", None)
    if eos is not None:
        ids.extend(int(i) for i in (eos if isinstance(eos, (list, tuple)) else [eos]))
    ids = list(dict.fromkeys(ids))  # unique, order kept
    if not ids:
        raise ValueError(
            "Could not find any stop token: the tokenizer has no eos_token_id and the "
            "model's generation_config has none. Pass stop_token_ids=[...] to "
            "generate()."
        )
    return ids


def _render_prompt(tokenizer, prompt) -> str:
    """A raw string is used as-is; a list of chat messages goes through the template."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)) and all(isinstance(m, dict) for m in prompt):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                "A prompt is a list of chat messages but the tokenizer has no chat "
                "template. Pass raw strings, or use a tokenizer with a chat_template."
            )
        return tokenizer.apply_chat_template(
            list(prompt), add_generation_prompt=True, tokenize=False
        )
    raise TypeError(
        "Each prompt must be a string or a list of chat messages "
        f"([{{'role': 'user', 'content': ...}}]); got {type(prompt).__name__}: "
        f"{str(prompt)[:80]!r}"
    )


def tokenize_prompts(
    tokenizer, prompts: Sequence, pad_id: int, device=None
) -> tuple[list[str], Tensor, Tensor]:
    """Render, tokenise and **left-pad** prompts.

    Returns ``(texts, ids [N, P], mask [N, P])`` where ``P`` is the longest prompt.
    Left padding puts every prompt's last token in column ``P - 1``, so one forward pass
    yields the next-token logits of all rows at ``logits[:, -1]``.
    Chat-rendered prompts are tokenised without extra special tokens (the template
    already wrote them); raw strings use the tokenizer's defaults.
    """
    texts = [_render_prompt(tokenizer, p) for p in prompts]
    rows = []
    for prompt, text in zip(prompts, texts):
        ids = tokenizer(text, add_special_tokens=isinstance(prompt, str))["input_ids"]
        if len(ids) == 0:
            raise ValueError(
                f"Prompt {text!r} tokenises to zero tokens; the model needs at least "
                "one token to condition on."
            )
        rows.append(ids)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # [N, P]
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [N, P]
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return texts, ids.to(device), mask.to(device)


def top_p_filter(logits: Tensor, top_p: float) -> Tensor:
    r"""Nucleus (top-p) filtering (Holtzman et al., 2020, *The Curious Case of Neural
    Text Degeneration*): keep the smallest set of most likely tokens whose total
    probability reaches ``top_p``; set the rest to ``-inf``.

    With tokens sorted by probability, :math:`p_{(1)} \ge p_{(2)} \ge \dots`, token
    :math:`(i)` is kept iff the mass *before* it is still short of the target:

    .. math:: \text{keep}_{(i)} \iff \sum_{j<i} p_{(j)} < p_{\text{top}}

    so the most likely token is always kept and ``top_p = 1`` keeps everything.
    ``logits``: ``[B, V]`` (already divided by the temperature). Returns ``[B, V]``.
    """
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}; 1.0 disables it.")
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # [B, V]
    probs = sorted_logits.softmax(dim=-1)  # [B, V]
    mass_before = probs.cumsum(dim=-1) - probs  # [B, V] mass of strictly better tokens
    remove_sorted = mass_before >= top_p  # [B, V]
    remove = remove_sorted.scatter(-1, order, remove_sorted)  # back to vocab order
    return logits.masked_fill(remove, float("-inf"))


def next_token(
    logits: Tensor,
    temperature: float = 1.0,
    top_p: float = 1.0,
    do_sample: bool = True,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""Choose one token per row from the last position's logits ``[B, V]`` -> ``[B]``.

    Greedy (``do_sample=False`` or ``temperature == 0``): :math:`\arg\max_v z_v`.
    Sampling: :math:`y \sim \mathrm{softmax}(z / \tau)` restricted to the top-p nucleus
    (:func:`top_p_filter`), with :math:`\tau` the ``temperature``. Lower :math:`\tau`
    sharpens the distribution, higher flattens it.
    """
    logits = logits.float()  # [B, V] softmax in float32 even for bf16 models
    if not do_sample or temperature == 0:
        return logits.argmax(dim=-1)  # [B]
    logits = top_p_filter(logits / temperature, top_p)  # [B, V]
    probs = logits.softmax(dim=-1)  # [B, V]
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


def _check_arguments(prompts, num_generations, max_new_tokens, temperature, top_p,
                     batch_size) -> None:
    if isinstance(prompts, str) or (
        isinstance(prompts, (list, tuple)) and prompts and isinstance(prompts[0], dict)
    ):
        raise TypeError(
            "prompts must be a list of prompts; got a single prompt. Wrap it: "
            "generate(model, tokenizer, [prompt], ...)."
        )
    if len(prompts) == 0:
        raise ValueError("prompts is empty: pass at least one prompt to generate().")
    if not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(
            f"num_generations (the group size G) must be an integer >= 1, got "
            f"{num_generations!r}."
        )
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(
            f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}."
        )
    if temperature < 0 or not math.isfinite(temperature):
        raise ValueError(
            f"temperature must be a finite number >= 0, got {temperature}. "
            "Use 0 (or do_sample=False) for greedy decoding."
        )
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}; 1.0 disables it.")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(
            f"batch_size must be None (all rows at once) or an integer >= 1, got "
            f"{batch_size!r}."
        )


# ------------------------------------------------------------------------- the loop


def cache_kwarg(model, cache) -> dict:
    """``{name: cache}``, the keyword by which ``model``'s forward takes its KV cache:
    ``cache`` from transformers 5.24 on, ``past_key_values`` before (still accepted
    there, with a deprecation warning)."""
    return {_cache_name(type(model)): cache}


@functools.lru_cache(maxsize=None)
def _cache_name(cls) -> str:
    params = inspect.signature(cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def decode_batch(model, ids, mask, *, max_new_tokens, temperature, top_p, do_sample,
                 generator, stop_ids, pad_id, ignore_eos=False, use_cache=True):
    """The decode loop for one batch of left-padded prompts ``ids, mask [b, P]``.

    Prefill once, then one token per step: with ``use_cache`` only the new token is fed
    and attention reads the keys/values of all earlier tokens from the cache; without it
    the whole sequence is recomputed every step. A row that has emitted a stop token
    emits ``pad_id`` from then on, with mask 0. Returns ``(completion_ids [b, C],
    completion_mask [b, C], finished [b])`` with ``C <= max_new_tokens``.
    """
    from transformers import DynamicCache

    rows = ids.shape[0]
    device = ids.device
    stop = torch.tensor(stop_ids, device=device)  # [S]
    finished = torch.zeros(rows, dtype=torch.bool, device=device)  # [b]
    tokens, alive = [], []  # max_new_tokens x [b]
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)  # [b, P] 0 at the first token
    cache = DynamicCache(config=model.config) if use_cache else None
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                **cache_kwarg(model, cache), use_cache=use_cache)  # prefill
    logits = out.logits[:, -1, :]  # [b, V]
    seq, seq_mask, seq_pos = ids, mask, positions  # used without a cache
    last_pos = positions[:, -1:]  # [b, 1]
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
        last_pos = last_pos + 1  # [b, 1]
        ones = torch.ones((rows, 1), dtype=mask.dtype, device=device)
        if use_cache:
            mask = torch.cat([mask, ones], dim=-1)  # [b, P + step + 1]
            out = model(input_ids=token[:, None], attention_mask=mask,
                        position_ids=last_pos, **cache_kwarg(model, cache),
                        use_cache=True)
        else:  # recompute the whole sequence: P + step + 1 tokens per step, not 1
            seq = torch.cat([seq, token[:, None]], dim=-1)
            seq_mask = torch.cat([seq_mask, ones], dim=-1)
            seq_pos = torch.cat([seq_pos, last_pos], dim=-1)
            out = model(input_ids=seq, attention_mask=seq_mask, position_ids=seq_pos,
                        use_cache=False)
        logits = out.logits[:, -1, :]  # [b, V]
    completion = torch.stack(tokens, dim=1)  # [b, C]
    completion_mask = torch.stack(alive, dim=1).long()  # [b, C]
    return completion, completion_mask, finished


def _pad_to(t: Tensor, width: int, value: int, left: bool) -> Tensor:
    extra = width - t.shape[1]
    if extra == 0:
        return t
    fill = torch.full((t.shape[0], extra), value, dtype=t.dtype, device=t.device)
    return torch.cat([fill, t] if left else [t, fill], dim=1)


def generate(
    model,
    tokenizer,
    prompts: Sequence,
    num_generations: int = 1,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    top_p: float = 1.0,
    do_sample: bool = True,
    batch_size: int | None = None,
    seed: int | None = None,
    *,
    stop_token_ids: Sequence[int] | None = None,
    ignore_eos: bool = False,
    use_cache: bool = True,
    decode_fn=None,
) -> Rollout:
    r"""Sample ``num_generations`` completions for each prompt: :math:`o_i \sim
    \pi_\theta(\cdot \mid q)`, :math:`i = 1..G`, token by token with a KV cache.

    Each step draws :math:`y_t \sim \mathrm{softmax}(z_t / \tau)` restricted to the
    top-p nucleus, or takes :math:`\arg\max z_t` when ``do_sample=False`` or
    ``temperature=0``.

    Args:
        prompts: raw strings (used as-is) or chat-message lists (rendered with the chat
            template and ``add_generation_prompt=True``).
        num_generations: the group size ``G``; output rows are group-major.
        max_new_tokens: the completion budget; rows that reach it unfinished are
            truncated.
        batch_size: how many rows (of the ``num_prompts * G``) to decode together;
            ``None`` decodes all at once. Smaller saves memory; the result layout is the
            same.
        seed: seeds a private ``torch.Generator``: the same seed gives the same samples
            (for the same ``batch_size``); ``None`` draws from torch's global generator.
        stop_token_ids: override the stop tokens (default
            :func:`resolve_stop_token_ids`).
        ignore_eos: never stop early (benchmarks use it to force equal lengths).
        use_cache: ``False`` re-runs the full sequence each step (the chapter times
            both).
        decode_fn: the decode loop run on each chunk of rows, called like
            :func:`decode_batch` (the default);
            :func:`grpo_lib.qwen2.decode_static` runs the from-scratch model over a
            static cache. Everything around the loop (prompts, padding, seeding,
            decoding the texts) is shared.

    Returns:
        a :class:`Rollout` on the model's device. The model's train/eval mode is
        restored.
    """
    _check_arguments(prompts, num_generations, max_new_tokens, temperature, top_p,
                     batch_size)
    device = next(model.parameters()).device
    stop_ids = (list(stop_token_ids) if stop_token_ids is not None
                else resolve_stop_token_ids(tokenizer, model))
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = stop_ids[0]
    texts, ids, mask = tokenize_prompts(tokenizer, prompts, pad_id, device)  # [N, P]
    ids = ids.repeat_interleave(num_generations, dim=0)  # [B, P] group-major
    mask = mask.repeat_interleave(num_generations, dim=0)  # [B, P]
    rows = ids.shape[0]
    chunk = rows if batch_size is None else batch_size
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)
    decode_fn = decode_batch if decode_fn is None else decode_fn

    was_training = model.training
    model.eval()
    pieces = []
    try:
        with torch.inference_mode():
            for start in range(0, rows, chunk):
                pieces.append(decode_fn(
                    model, ids[start:start + chunk], mask[start:start + chunk],
                    max_new_tokens=max_new_tokens, temperature=temperature,
                    top_p=top_p, do_sample=do_sample, generator=generator,
                    stop_ids=stop_ids, pad_id=pad_id, ignore_eos=ignore_eos,
                    use_cache=use_cache))
    finally:
        model.train(was_training)

    # Outside inference mode: clone so the trainer can use these tensors under autograd.
    width = max(p[0].shape[1] for p in pieces)
    completion_ids = torch.cat([_pad_to(p[0], width, pad_id, left=False)
                                for p in pieces]).clone()  # [B, C]
    completion_mask = torch.cat([_pad_to(p[1], width, 0, left=False)
                                 for p in pieces]).clone()  # [B, C]
    finished = torch.cat([p[2] for p in pieces]).clone()  # [B]
    sampler_logprobs = None  # a 4th output of the decode loop, when it has one
    if all(len(p) > 3 for p in pieces):
        sampler_logprobs = torch.cat([_pad_to(p[3], width, 0.0, left=False)
                                      for p in pieces]).clone()  # [B, C]
    decoded = [
        tokenizer.decode(row[: int(n)].tolist(), skip_special_tokens=True)
        for row, n in zip(completion_ids.cpu(), completion_mask.sum(-1).cpu())
    ]
    return Rollout(
        prompt_ids=ids.clone(),
        prompt_mask=mask.clone(),
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        finished=finished,
        texts=decoded,
        prompts=[t for t in texts for _ in range(num_generations)],
        num_generations=num_generations,
        sampler_logprobs=sampler_logprobs,
    )
