"""Tests for grpo_lib.graph_decode, the decode step replayed as a CUDA graph.

The claims:

- the replayable step (every index a tensor, the attention over the whole cache) run
  eagerly on a CPU draws the tokens of the eager fast loop from the same seed, greedy
  and sampled, with top-p, when rows stop early, and its log-probs agree to round-off;
- the multinomial draw from a buffer of exponential numbers is ``torch.multinomial``'s
  token, on a CPU and on a CUDA device, and the replayable step with that draw gives
  the eager loop's tokens;
- logits that are not finite raise after the loop, whatever the draw (greedy, inverse
  CDF, race; the graph's step as well as the eager loop);
- ``decode_step`` with a ``[1]`` tensor column gives the int column's logits;
- on a CUDA device (skipped elsewhere): the captured graph replays exactly what the
  uncaptured step computes, in float32 and bfloat16, ``decode_fast`` takes the graph
  path there by default (for the multinomial draw too, whose tokens stay
  ``torch.multinomial``'s), and the graph sees the weights of the latest update.
"""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from grpo_lib.fast_decode import (decode_fast, decode_step, require_finite,
                                  sample_multinomial, sampling_probs, start_decode)
from grpo_lib.graph_decode import decode_graphed
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.qwen2 import Qwen2
from grpo_lib.sampling import generate, tokenize_prompts
from grpo_lib.tasks import load_task_split

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "data/models/tiny-qwen2-base"
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def tiny():
    hf, tok = load_model_and_tokenizer(TINY)
    return hf, Qwen2.from_transformers(hf, share_weights=True), tok


@pytest.fixture(scope="module")
def prompts():
    return load_task_split("arithmetic", "test")["prompt"][:6]


def _rollouts(model, tok, prompts, decode_fns, **kwargs):
    kwargs = {"num_generations": 4, "max_new_tokens": 48, "seed": 5, **kwargs}
    return [generate(model, tok, prompts, decode_fn=fn, **kwargs) for fn in decode_fns]


@pytest.mark.parametrize("kwargs", [dict(do_sample=False), dict(temperature=1.0),
                                    dict(temperature=0.7, top_p=0.9),
                                    dict(max_new_tokens=160)],
                         ids=["greedy", "sampled", "top_p", "rows_stop_early"])
def test_the_replayable_step_draws_the_eager_loops_tokens(tiny, prompts, kwargs):
    _, model, tok = tiny
    eager, graphed = _rollouts(model, tok, prompts, [
        decode_fast, functools.partial(decode_graphed, capture=False)], **kwargs)
    assert torch.equal(graphed.completion_ids, eager.completion_ids)
    assert torch.equal(graphed.completion_mask, eager.completion_mask)
    assert torch.equal(graphed.finished, eager.finished)
    gap = (graphed.sampler_logprobs - eager.sampler_logprobs).abs().max().item()
    assert gap <= 1e-4, gap
    if kwargs.get("max_new_tokens") == 160:  # every row stopped: the loop ended early
        assert eager.finished.all() and eager.completion_ids.shape[1] < 160


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=cuda)])
@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_the_race_on_exponential_numbers_is_torch_multinomial(device, top_p):
    logits = 3 * torch.randn(64, 500, generator=torch.Generator().manual_seed(3))
    logits = logits.to(device)
    probs = sampling_probs(logits, 0.8, top_p)  # [64, 500]
    theirs = torch.Generator(device).manual_seed(11)
    ours = torch.Generator(device).manual_seed(11)
    want = torch.multinomial(probs, 1, generator=theirs).squeeze(-1)  # [64]
    e = torch.empty_like(probs).exponential_(generator=ours)  # a graph's buffer
    got = sample_multinomial(logits, 0.8, top_p, e=e)
    assert torch.equal(got, want)
    assert torch.equal(ours.get_state(), theirs.get_state())


@pytest.mark.parametrize("kwargs", [dict(temperature=1.0),
                                    dict(temperature=0.7, top_p=0.9)],
                         ids=["sampled", "top_p"])
def test_the_replayable_step_draws_the_eager_multinomial_tokens(tiny, prompts, kwargs):
    _, model, tok = tiny
    eager, graphed = _rollouts(model, tok, prompts, [
        functools.partial(decode_fast, sampler="multinomial"),
        functools.partial(decode_graphed, capture=False, sampler="multinomial")],
        **kwargs)
    assert torch.equal(graphed.completion_ids, eager.completion_ids)
    assert torch.equal(graphed.completion_mask, eager.completion_mask)
    gap = (graphed.sampler_logprobs - eager.sampler_logprobs).abs().max().item()
    assert gap <= 1e-4, gap


def test_a_graph_refuses_the_race_sampler(tiny, prompts):
    _, model, tok = tiny
    with pytest.raises(ValueError, match="a graph draws by 'inverse_cdf' or"):
        generate(model, tok, prompts[:1], max_new_tokens=4, decode_fn=functools.partial(
            decode_graphed, capture=False, sampler="race"))


@pytest.fixture(scope="module")
def diverged(tiny):
    """A copy of the tiny model with a nan in its final norm: every logit nan."""
    hf, _, tok = tiny
    model = Qwen2.from_transformers(hf)  # a copy: the shared fixture stays sound
    with torch.no_grad():
        model.model.norm.weight[0] = float("nan")
    return model, tok


@pytest.mark.parametrize("decode_fn", [
    functools.partial(decode_graphed, capture=False),
    functools.partial(decode_graphed, capture=False, sampler="multinomial"),
    functools.partial(decode_fast, sampler="inverse_cdf"),
    functools.partial(decode_fast, sampler="race")],
    ids=["graph_step_inverse_cdf", "graph_step_multinomial", "inverse_cdf", "race"])
@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
def test_logits_that_are_not_finite_raise_whatever_the_draw(diverged, prompts,
                                                            decode_fn, do_sample):
    """Greedy argmax, the inverse CDF and the race all pick some token from nan
    logits without complaint; the decode loop refuses them after the fact."""
    model, tok = diverged
    with pytest.raises(RuntimeError, match="not finite .* the model has diverged"):
        generate(model, tok, prompts[:2], num_generations=2, max_new_tokens=6,
                 do_sample=do_sample, seed=0, decode_fn=decode_fn)


def test_require_finite_reads_only_the_rows_still_writing():
    logp = torch.tensor([[-0.5, -1.0], [-0.2, 0.0]])  # row 1 stopped after a token
    assert require_finite(logp) is logp
    logp[0, 1] = float("nan")
    with pytest.raises(RuntimeError, match=r"in rows \[0\]"):
        require_finite(logp)


def test_a_tensor_column_gives_the_int_columns_logits(tiny, prompts):
    _, model, tok = tiny
    _, ids, mask = tokenize_prompts(tok, prompts[:3], tok.pad_token_id)
    token = torch.tensor([5, 6, 7])
    logits = {}
    for kind in ("int", "tensor"):
        with torch.no_grad():
            start = start_decode(model, ids, mask, max_new_tokens=4)
            P = ids.shape[1]
            start.bias[:, P] = 0.0
            column = P if kind == "int" else torch.tensor([P])
            position = start.position + 1
            cos = start.cos_table[0, position, None]
            sin = start.sin_table[0, position, None]
            logits[kind] = decode_step(model, start.layers, token, column, cos, sin,
                                       start.bias, start.cache)
    assert (logits["int"] - logits["tensor"]).abs().max().item() <= 1e-5


def test_capture_needs_a_cuda_device(tiny, prompts):
    _, model, tok = tiny
    with pytest.raises(ValueError, match="capture=True needs the prompts on a CUDA"):
        generate(model, tok, prompts[:1], max_new_tokens=4,
                 decode_fn=functools.partial(decode_graphed, capture=True))


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
def test_the_captured_graph_replays_the_step(prompts, dtype, do_sample):
    hf, tok = load_model_and_tokenizer(TINY, device="cuda", dtype=dtype)
    model = Qwen2.from_transformers(hf, share_weights=True)
    uncaptured, captured, default = _rollouts(model, tok, prompts, [
        functools.partial(decode_graphed, capture=False),
        functools.partial(decode_graphed, capture=True), decode_fast],
        do_sample=do_sample, max_new_tokens=96)
    for graphed in (captured, default):  # decode_fast takes the graph on CUDA
        assert torch.equal(graphed.completion_ids, uncaptured.completion_ids)
        assert torch.equal(graphed.completion_mask, uncaptured.completion_mask)
        gap = (graphed.sampler_logprobs - uncaptured.sampler_logprobs).abs().max()
        assert gap.item() <= 1e-5, gap
    if dtype == torch.float32 and not do_sample:  # generate's tokens, row for row
        reference = generate(hf, tok, prompts, num_generations=4, max_new_tokens=96,
                             do_sample=False)
        C = reference.completion_ids.shape[1]
        same = (captured.completion_ids[:, :C] == reference.completion_ids).all(1)
        assert captured.completion_ids.shape[1] == C and same.all(), same


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_multinomial_graph_replays_torch_multinomials_draw(prompts, dtype):
    hf, tok = load_model_and_tokenizer(TINY, device="cuda", dtype=dtype)
    model = Qwen2.from_transformers(hf, share_weights=True)
    draw = functools.partial(decode_graphed, sampler="multinomial")
    eager, uncaptured, captured, default = _rollouts(model, tok, prompts, [
        functools.partial(decode_fast, sampler="multinomial", cuda_graph=False),
        functools.partial(draw, capture=False), functools.partial(draw, capture=True),
        functools.partial(decode_fast, sampler="multinomial")],
        max_new_tokens=96, top_p=0.95)
    for graphed in (captured, default):  # decode_fast takes the graph on CUDA
        assert torch.equal(graphed.completion_ids, uncaptured.completion_ids)
        gap = (graphed.sampler_logprobs - uncaptured.sampler_logprobs).abs().max()
        assert gap.item() <= 1e-5, gap
    if dtype == torch.float32:  # the eager loop calls torch.multinomial itself
        assert torch.equal(captured.completion_ids, eager.completion_ids)


@cuda
def test_each_rollout_graphs_the_latest_weights(prompts):
    hf, tok = load_model_and_tokenizer(TINY, device="cuda")
    model = Qwen2.from_transformers(hf, share_weights=True)

    def greedy(fn):
        return generate(model if fn else hf, tok, prompts, do_sample=False,
                        max_new_tokens=16, decode_fn=fn).completion_ids

    assert torch.equal(greedy(decode_fast), greedy(None))
    with torch.no_grad():  # an in-place change, like an optimizer step
        hf.model.embed_tokens.weight.mul_(-3.0)
    assert torch.equal(greedy(decode_fast), greedy(None)), "stale weights"
