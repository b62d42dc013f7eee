"""Fast GRPO steps: one rollout orchestration for both decode loops, and the trainer's
``rollout_engine="scratch"`` (the from-scratch Qwen2 over the policy's own tensors).

The claims tested here:

- ``grpo_lib.sampling.generate(..., decode_fn=decode_static)`` *is*
  ``generate_static``: the from-scratch path differs only in its decode loop;
- with the same seed, a short GRPO run samples the same tokens and ends with the same
  weights whichever engine rolls out (the from-scratch logits agree with
  ``transformers`` to the bit on these shapes);
- the scratch sampler shares the policy's memory, so a rollout after an update (or any
  in-place change of the weights) uses the new weights; a replaced tensor (the policy
  moved to another dtype) makes the trainer rebuild it.
"""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.qwen2 import Qwen2, decode_static, generate_static
from grpo_lib.sampling import generate
from grpo_lib.trainer import GRPOConfig, GRPOTrainer, _shares_weights

ROWS = [{"question": q, "answer": a,
         "prompt": [{"role": "user", "content": f"What is {q}?"}]}
        for q, a in [("2 + 3", "5"), ("4 * 2", "8"), ("7 - 1", "6"), ("6 - 2", "4")]]
PROMPTS = [row["prompt"] for row in ROWS]


def digit_share(completions, **kwargs):
    """Share of digit characters in each completion (0 for an empty one)."""
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in completions]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _config(tmp_path, engine: str, **overrides) -> GRPOConfig:
    values = dict(output_dir=str(tmp_path / engine), per_step_prompts=2,
                  num_generations=4, max_completion_length=12, max_steps=3,
                  learning_rate=3e-2, progress_bar=False, sample_every=0, seed=0,
                  rollout_engine=engine)
    values.update(overrides)
    return GRPOConfig(**values)


def _run(tmp_path, tokenizer, engine: str):
    """A seeded 3-step run; returns (trainer, metrics table, flat final weights)."""
    model = random_model(tokenizer, size="micro", seed=0)
    trainer = GRPOTrainer(model, tokenizer, [digit_share],
                          _config(tmp_path, engine), ROWS)
    trainer.train()
    metrics = pd.read_csv(tmp_path / engine / "metrics.csv")
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return trainer, metrics, weights


# ------------------------------------------------------------- one orchestration


def test_generate_static_is_generate_with_the_static_decode_loop(tokenizer):
    hf = random_model(tokenizer, size="micro", seed=1)
    ours = Qwen2.from_transformers(hf)
    kwargs = dict(num_generations=3, max_new_tokens=10, top_p=0.9, seed=5)
    a = generate_static(ours, tokenizer, PROMPTS, **kwargs)
    b = generate(ours, tokenizer, PROMPTS, decode_fn=decode_static, **kwargs)
    ref = generate(hf, tokenizer, PROMPTS, **kwargs)  # the transformers decode loop
    for got in (a, b):
        assert torch.equal(got.completion_ids, ref.completion_ids)
        assert torch.equal(got.completion_mask, ref.completion_mask)
        assert torch.equal(got.prompt_ids, ref.prompt_ids)
        assert got.texts == ref.texts and got.prompts == ref.prompts


def test_greedy_and_chunked_rollouts_unchanged(tokenizer):
    hf = random_model(tokenizer, size="micro", seed=2)
    ours = Qwen2.from_transformers(hf)
    for kwargs in (dict(do_sample=False, max_new_tokens=9),
                   dict(num_generations=2, max_new_tokens=9, batch_size=3, seed=1)):
        ref = generate(hf, tokenizer, PROMPTS, **kwargs)
        got = generate_static(ours, tokenizer, PROMPTS, **kwargs)
        assert torch.equal(got.completion_ids, ref.completion_ids), kwargs
        assert torch.equal(got.finished, ref.finished), kwargs


def test_static_decode_refuses_use_cache_false(tokenizer):
    ours = Qwen2.from_transformers(random_model(tokenizer, size="micro", seed=0))
    with pytest.raises(ValueError, match="use_cache=False use grpo_lib.sampling"):
        generate(ours, tokenizer, PROMPTS, max_new_tokens=4, use_cache=False,
                 decode_fn=decode_static)


# ------------------------------------------------------------ the trainer's engine


def test_rollout_engine_is_validated():
    with pytest.raises(ValueError, match="rollout_engine='vllm'; choose one of"):
        GRPOConfig(rollout_engine="vllm").validate()
    assert GRPOConfig().rollout_engine == "fast"  # on by default: chapter 19 proves it


class Doubled(torch.nn.Linear):
    """A layer with a forward of its own (as an adapter has)."""

    def forward(self, x):
        return 2 * super().forward(x)


def test_a_policy_the_fast_engine_cannot_decode_rolls_out_with_transformers(
        tmp_path, tokenizer):
    model = random_model(tokenizer, size="micro", seed=0)
    attn = model.model.layers[0].self_attn
    doubled = Doubled(attn.q_proj.in_features, attn.q_proj.out_features)
    doubled.load_state_dict(attn.q_proj.state_dict())
    attn.q_proj = doubled
    trainer = GRPOTrainer(model, tokenizer, [digit_share],
                          _config(tmp_path, "fast", max_steps=1), ROWS)
    with pytest.warns(UserWarning, match="q_proj is a Doubled, not a plain nn.Linear"):
        assert trainer._rollout_model() == (model, None)  # the policy's own forward
    trainer.train()  # one step through the policy, no second warning needed
    assert trainer.step == 1
    corrected = GRPOTrainer(model, tokenizer, [digit_share],
                            _config(tmp_path / "c", "fast", sampling_correction=True),
                            ROWS)
    with pytest.raises(ValueError, match="sampling_correction needs"):
        corrected._rollout_model()


def test_a_plain_qwen2_policy_keeps_the_engine_it_asked_for(tmp_path, tokenizer):
    model = random_model(tokenizer, size="micro", seed=0)
    trainer = GRPOTrainer(model, tokenizer, [digit_share], _config(tmp_path, "fast"),
                          ROWS)
    assert isinstance(trainer._rollout_model()[0], Qwen2)


def test_scratch_engine_gives_the_same_seeded_run(tmp_path, tokenizer):
    """Same seed, same samples, same losses, same final weights, bit for bit."""
    _, ref, w_ref = _run(tmp_path, tokenizer, "transformers")
    trainer, got, w_got = _run(tmp_path, tokenizer, "scratch")
    assert isinstance(trainer._rollout_model()[0], Qwen2)
    timing = [c for c in ref.columns if c.startswith("time") or c == "elapsed"]
    pd.testing.assert_frame_equal(ref.drop(columns=timing),
                                  got.drop(columns=timing), check_exact=True)
    assert ref["reward"].std() > 0, "no reward variance: a weak test"
    assert torch.equal(w_ref, w_got)


def test_scratch_sampler_sees_every_update(tmp_path, tokenizer):
    model = random_model(tokenizer, size="micro", seed=0)
    trainer = GRPOTrainer(model, tokenizer, [digit_share],
                          _config(tmp_path, "scratch", max_steps=1), ROWS)
    trainer.train()  # one optimizer step on the shared tensors
    scratch, decode_fn = trainer._rollout_model()
    assert decode_fn is decode_static and _shares_weights(scratch, model)
    kwargs = dict(num_generations=2, max_new_tokens=8, seed=3)

    def both():
        return (generate(model, tokenizer, PROMPTS, **kwargs).completion_ids,
                generate(scratch, tokenizer, PROMPTS, decode_fn=decode_static,
                         **kwargs).completion_ids)

    before, same = both()
    assert torch.equal(before, same)
    with torch.no_grad():  # an in-place change, like an optimizer step
        model.model.embed_tokens.weight.mul_(-3.0)
    after, same_after = both()
    assert not torch.equal(after, before), "the change should change the samples"
    assert torch.equal(same_after, after), "the scratch sampler used stale weights"
    assert trainer._rollout_model()[0] is scratch  # still shared: not rebuilt


def test_replaced_weights_rebuild_the_sampler(tmp_path, tokenizer):
    model = random_model(tokenizer, size="micro", seed=0)
    trainer = GRPOTrainer(model, tokenizer, [digit_share],
                          _config(tmp_path, "scratch", max_steps=1), ROWS)
    first, _ = trainer._rollout_model()
    model.double()  # every tensor replaced: the old sampler no longer shares them
    assert not _shares_weights(first, model)
    second, _ = trainer._rollout_model()
    assert second is not first and _shares_weights(second, model)
    assert second.model.embed_tokens.weight.dtype == torch.float64


# --------------------------------------------- the sampler's log-probs vs the trainer's


def _gap(tokenizer, dtype):
    """(trainer - sampler) per-token log-prob gap on a seeded rollout in ``dtype``."""
    from grpo_lib.logprobs import sequence_logprobs
    from grpo_lib.qwen2 import rollout_logprobs

    hf = random_model(tokenizer, size="micro", seed=0).to(dtype)
    ours = Qwen2.from_transformers(hf, share_weights=True)
    r = generate_static(ours, tokenizer, PROMPTS, num_generations=2, max_new_tokens=12,
                        seed=0)
    roll = rollout_logprobs(ours, r.prompt_ids, r.prompt_mask, r.completion_ids)
    with torch.no_grad():
        train = sequence_logprobs(hf, r.prompt_ids, r.prompt_mask, r.completion_ids,
                                  r.completion_mask)
    mask = r.completion_mask.bool()
    return (train.float() - roll)[mask]


def test_rollout_logprobs_match_the_trainers_in_float32(tokenizer):
    """Same tokens, but the whole-sequence forward and the one-token steps sum in
    different orders: float32 round-off (a few 1e-7), far below any clip range."""
    gap = _gap(tokenizer, torch.float32)
    assert gap.numel() > 0 and gap.abs().max() < 1e-5


def test_bfloat16_gap_is_larger_but_round_off(tokenizer):
    gap32 = _gap(tokenizer, torch.float32)
    gap16 = _gap(tokenizer, torch.bfloat16)
    assert gap16.abs().max() > 100 * gap32.abs().max()
    assert gap16.abs().mean() < 0.1, f"mean |gap| {gap16.abs().mean():.3f}"
