r"""CUDA graphs for the fast decode step: one launch per token instead of hundreds.

On a GPU, a decode step of a small model is a few hundred small kernels (about 25 per
layer, :mod:`grpo_lib.fast_decode`), each done in a few microseconds and each launched
from Python: the GPU waits for the launches, not for the arithmetic. A CUDA graph
records the kernels of one step once and replays all of them with one call
(``torch.cuda.CUDAGraph``). A replay runs the *same* kernels on the *same* memory, so
whatever a step reads or writes lives in buffers made before the capture, and whatever
changes from one step to the next is a number inside those buffers, never a Python
number:

- the cache column and the output column are ``[1]`` tensors that the step increments
  in place, and the positions a ``[b]`` tensor;
- the attention reads all ``P + max_new_tokens`` columns of the cache, the bias hiding
  those not yet written (:func:`grpo_lib.fast_decode.decode_step` with a tensor
  column), so no shape depends on the step;
- the draw takes its random numbers from a buffer that the seeded generator fills
  before each replay: the uniform numbers
  :func:`~grpo_lib.fast_decode.sample_inverse_cdf` would draw, or the exponential
  ones ``torch.multinomial`` would, so the graph holds no random state and a seed
  gives the eager path's tokens (to round-off in the logits);
- the chosen tokens, the alive mask and the sampler's log-probs go into
  ``[b, max_new_tokens]`` buffers at the step's column.

The loop is then: fill the random numbers, replay, and ask once whether every row has
stopped. Step 0 runs eagerly on a side stream (the warm-up a capture needs); step 1 is
captured, which runs nothing, then replayed like every later step. Without CUDA
(``capture=False``) the same step function runs eagerly, as the tests run it on a CPU.

A graph cannot raise, so the draws cannot refuse logits that are not finite the way
``torch.multinomial`` does; the sampler's log-probs record them (a ``nan`` for each
token drawn from such a row), and one check after the loop raises
(:func:`grpo_lib.fast_decode.require_finite`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from .fast_decode import (DecodeStart, decode_step, require_finite,
                          sample_inverse_cdf, sample_multinomial, start_decode)
from .qwen2 import Qwen2

__all__ = ["StepBuffers", "graph_step", "decode_graphed"]


@dataclass
class StepBuffers:
    """Everything that changes from one decode step to the next, in place."""

    logits: Tensor  # [b, V] the logits the next token is chosen from
    u: Tensor  # [b] uniform numbers for the next inverse-CDF draw
    e: Tensor  # [b, V] Exp(1) numbers for the next multinomial draw ([b, 0] if none)
    column: Tensor  # [1] the cache column of the token being chosen
    step: Tensor  # [1] its column in the outputs
    position: Tensor  # [b] the position of the last token fed
    finished: Tensor  # [b] bool: the row has emitted a stop token
    tokens: Tensor  # [b, N] chosen tokens
    alive: Tensor  # [b, N] bool: the token is part of the completion
    logprobs: Tensor  # [b, N] float32: its log-probability under the sampler


def graph_step(model: Qwen2, start: DecodeStart, buf: StepBuffers, stop: Tensor, *,
               pad_id: int, tau: float, greedy: bool, top_p: float,
               ignore_eos: bool, sampler: str = "inverse_cdf") -> None:
    """One decode step on ``buf``, in place: choose each row's token from
    ``buf.logits``, record it, and compute the logits after it. Every index is a
    tensor on the device and every shape fixed, so a CUDA graph can replay it."""
    if greedy:
        token = buf.logits.argmax(dim=-1)  # [b]
    elif sampler == "multinomial":  # its numbers were drawn into buf.e before
        token = sample_multinomial(buf.logits, tau, top_p, e=buf.e)  # [b]
    else:  # the uniform numbers were drawn into buf.u before the replay
        token = sample_inverse_cdf(buf.logits, tau, top_p, u=buf.u)  # [b]
    token = torch.where(buf.finished, pad_id, token)
    logp = torch.log_softmax(buf.logits.float() / tau, dim=-1)  # [b, V]
    logp = logp.gather(1, token[:, None])  # [b, 1]
    buf.tokens.index_copy_(1, buf.step, token[:, None])
    buf.alive.index_copy_(1, buf.step, ~buf.finished[:, None])
    buf.logprobs.index_copy_(1, buf.step, logp)
    if not ignore_eos:
        buf.finished |= (token[:, None] == stop).any(dim=-1)  # [b]
    start.bias.index_fill_(1, buf.column, 0.0)  # the new token becomes readable
    buf.position += 1
    cos = start.cos_table[0, buf.position, None]  # [b, 1, d]
    sin = start.sin_table[0, buf.position, None]
    buf.logits.copy_(decode_step(model, start.layers, token, buf.column, cos, sin,
                                 start.bias, start.cache))
    buf.column += 1
    buf.step += 1


def decode_graphed(model: Qwen2, ids: Tensor, mask: Tensor, *, max_new_tokens: int,
                   temperature: float = 1.0, top_p: float = 1.0,
                   do_sample: bool = True, generator: torch.Generator | None = None,
                   stop_ids: Sequence[int], pad_id: int, ignore_eos: bool = False,
                   use_cache: bool = True, capture: bool | None = None,
                   sampler: str = "inverse_cdf"):
    """:func:`grpo_lib.fast_decode.decode_fast` (greedy, or ``sampler``
    ``"inverse_cdf"`` or ``"multinomial"``) with each step after the first replayed
    as one CUDA graph. Same arguments and returns; ``capture``: record and replay the
    graph (default: when ``ids`` is on a CUDA device), else run :func:`graph_step`
    eagerly."""
    if not use_cache:
        raise ValueError("decode_graphed always decodes over its static cache; for "
                         "use_cache=False use grpo_lib.sampling.decode_batch.")
    if sampler not in ("inverse_cdf", "multinomial"):
        raise ValueError(f"sampler={sampler!r}: a graph draws by 'inverse_cdf' or "
                         "'multinomial'; decode_fast runs the others step by step.")
    capture = ids.is_cuda if capture is None else capture
    if capture and not ids.is_cuda:
        raise ValueError("capture=True needs the prompts on a CUDA device; a CPU "
                         "runs graph_step eagerly (capture=False).")
    (b, P), device, N = ids.shape, ids.device, max_new_tokens
    greedy = not do_sample or temperature == 0
    multinomial = not greedy and sampler == "multinomial"
    start = start_decode(model, ids, mask, max_new_tokens)
    V = start.logits.shape[-1] if multinomial else 0
    buf = StepBuffers(
        logits=start.logits, u=torch.zeros(b, device=device),
        e=torch.empty(b, V, device=device),
        column=torch.tensor([P], device=device), step=torch.zeros(1, dtype=torch.long,
                                                                  device=device),
        position=start.position.clone(),
        finished=torch.zeros(b, dtype=torch.bool, device=device),
        tokens=torch.full((b, N), pad_id, dtype=torch.long, device=device),
        alive=torch.zeros(b, N, dtype=torch.bool, device=device),
        logprobs=torch.zeros(b, N, device=device))
    stop = torch.tensor(list(stop_ids), device=device)  # [S]
    step = functools.partial(graph_step, model, start, buf, stop, pad_id=pad_id,
                             tau=1.0 if greedy else temperature, greedy=greedy,
                             top_p=top_p, ignore_eos=ignore_eos, sampler=sampler)
    graph, done = None, 0
    while done < N:
        if multinomial:  # the numbers torch.multinomial draws: Exp(1) per token
            buf.e.exponential_(generator=generator)
        elif not greedy:
            buf.u.uniform_(generator=generator)  # the draw sample_inverse_cdf makes
        if graph is not None:
            graph.replay()
        elif capture and done == 0:  # warm-up: step 0, eagerly, on a side stream
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                step()
            torch.cuda.current_stream(device).wait_stream(side)
        elif capture:  # record step 1 once (recording runs nothing), then replay it
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            graph.replay()
        else:
            step()
        done += 1
        if not ignore_eos and bool(buf.finished.all()):
            break
    alive = buf.alive[:, :done]  # [b, C]
    sampler_logp = buf.logprobs[:, :done].masked_fill(~alive, 0.0)  # [b, C]
    return (buf.tokens[:, :done], alive.long(), buf.finished,
            require_finite(sampler_logp))
