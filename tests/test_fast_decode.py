"""Tests for grpo_lib.fast_decode, the decode step with few operator calls.

The claims:

- each trick computes what it replaces: ``x @ rotate_half_matrix`` is ``rotate_half``
  exactly; a :func:`decode_step` gives the logits of a full forward pass over the
  whole sequence to round-off, on the book's tiny and small checkpoints and on a model
  with an untied output layer, under left padding;
- greedy decoding gives ``transformers``' ``generate`` tokens on the checkpoints;
- :func:`sample_inverse_cdf` and :func:`sample_race` draw each token with its
  probability (never one with probability 0 or outside the top-p nucleus) and a seed
  repeats a rollout; :func:`sample_multinomial` draws ``torch.multinomial``'s very
  tokens and leaves the generator where ``torch.multinomial`` does;
- the trainer's ``rollout_engine="fast"`` trains and always samples with the latest
  weights.
"""
from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from grpo_lib.fast_decode import (Projection, decode_fast, decode_step, fuse_weights,
                                  generate_fast, pack_for_rows, prefill_once,
                                  exponential_from_rand, exponential_is_rand,
                                  rotate_half_matrix, sample_inverse_cdf,
                                  sample_multinomial, sample_race, sampling_probs)
from grpo_lib.models import build_tokenizer, load_model_and_tokenizer, random_model
from grpo_lib.packing import packing, packing_applies
from grpo_lib.qwen2 import Qwen2, StaticKVCache, load_qwen2, rope_cos_sin, rotate_half
from grpo_lib.sampling import generate, resolve_stop_token_ids, tokenize_prompts
from grpo_lib.tasks import load_task_split
from grpo_lib.trainer import GRPOConfig, GRPOTrainer
from trainer_fixtures import ROWS, digit_share

ROOT = Path(__file__).resolve().parents[1]
PACKABLE = packing_applies(torch.zeros(1))  # float32 on a CPU with oneDNN
CHECKPOINTS = {"tiny": ROOT / "data/models/tiny-qwen2-base",
               "small": ROOT / "data/models/small-qwen2-base"}


@pytest.fixture(scope="module")
def prompts():
    return load_task_split("arithmetic", "test")["prompt"][:8]


def test_rotate_half_matrix_is_rotate_half_exactly():
    x = torch.randn(5, 3, 32)
    assert torch.equal(x @ rotate_half_matrix(32), rotate_half(x))


def _untied_model():
    """A random Qwen2 with its own output layer (no tied embeddings)."""
    config = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, tie_word_embeddings=False,
                         max_position_embeddings=128, pad_token_id=0)
    torch.manual_seed(0)
    return Qwen2.from_transformers(Qwen2ForCausalLM(config).eval())


def _padded(tok, prompts, extra, vocab):
    _, ids, mask = tokenize_prompts(tok, prompts, tok.pad_token_id)  # [N, P]
    tail = torch.randint(3, vocab, (ids.shape[0], extra),
                         generator=torch.Generator().manual_seed(0))
    assert (mask == 0).any(), "the batch should contain left padding"
    return ids, mask, tail


@pytest.mark.parametrize("packed", [False, True], ids=["addmm", "packed"])
@pytest.mark.parametrize("name", ["tiny", "small", "untied"])
def test_decode_steps_give_the_full_forward_logits(name, packed, prompts):
    """Prefill the prompts, then 8 tokens through decode_step: every step's logits
    equal a full forward pass over the whole sequence to round-off (with the weights
    as plain matrices, and packed for the batch's rows where oneDNN is there)."""
    tok = build_tokenizer()
    model = _untied_model() if name == "untied" else load_qwen2(CHECKPOINTS[name])
    s, extra = model.settings, 8
    if name != "untied":
        tok = load_model_and_tokenizer(CHECKPOINTS[name])[1]
    ids, mask, tail = _padded(tok, prompts[:4], extra, s.vocab_size)
    (B, P), width = ids.shape, ids.shape[1] + extra
    full_ids = torch.cat([ids, tail], dim=1)
    full_mask = torch.cat([mask, torch.ones_like(tail)], dim=1)
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)  # [B, width]
    with torch.no_grad():
        expected = model(full_ids, full_mask, positions)[:, P:]  # [B, extra, V]
        cache = StaticKVCache(s, B, width)
        model(ids, mask, positions[:, :P], cache=cache)
        with packing("always"):  # the packed path, whether or not it pays here
            layers = fuse_weights(model, rows=B if packed else None)
        if packed and PACKABLE:
            assert all(w.qkv.packed is not None for w in layers)
        cos, sin = rope_cos_sin(positions, s.head_dim, s.rope_theta, torch.float32)
        bias = torch.full((B, width), torch.finfo(torch.float32).min)
        bias[:, :P].masked_fill_(mask.bool(), 0.0)
        got = []
        for j in range(extra):
            col = P + j
            bias[:, col] = 0.0
            got.append(decode_step(model, layers, tail[:, j], col, cos[:, col, None],
                                   sin[:, col, None], bias, cache))
    gap = (torch.stack(got, dim=1) - expected).abs().max().item()
    # float32 round-off grows with the logits' size (up to 17 here; 1 ulp at 16 is
    # 2e-6) and with how the matmul library splits its sums, which can change with
    # the machine's load: measured gaps are 2e-7 to 5e-5, a wrong step's are O(1)
    tolerance = 1e-5 * max(1.0, expected.abs().max().item())
    assert gap <= tolerance, f"{name}: decode_step logits differ by {gap:.2e}"


def test_packed_projection_is_addmm():
    """A Projection with a oneDNN-packed weight computes torch.addmm's product (to
    float32 round-off), with and without bias and residual, for the rows it was
    packed for and for fewer; where packing does not apply there is no copy."""
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(128, 96, generator=gen), torch.randn(96, generator=gen)
    packed = pack_for_rows(weight, 8)
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch has no oneDNN")
    assert packed is not None
    for rows in (8, 3):
        x = torch.randn(rows, 128, generator=gen)
        residual = torch.randn(rows, 96, generator=gen)
        for b, r in ((bias, None), (None, residual), (bias, residual), (None, None)):
            plain = Projection(weight, b)(x, residual=r)
            fast = Projection(weight, b, packed)(x, residual=r)
            assert fast.shape == plain.shape
            assert (fast - plain).abs().max() <= 1e-5 * plain.abs().max()
    assert pack_for_rows(weight.to(torch.bfloat16), 8) is None


def test_prefill_once_per_distinct_prompt(prompts):
    """Rows repeating a prompt (as in a GRPO group) are prefilled once: the same
    logits and cache contents as prefilling every row."""
    model, tok = load_qwen2(CHECKPOINTS["tiny"]), build_tokenizer()
    _, ids, mask = tokenize_prompts(tok, prompts[:3], tok.pad_token_id)
    order = torch.tensor([0, 0, 0, 1, 2, 2, 0])  # groups, and a prompt seen again
    ids, mask = ids[order], mask[order]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    caches = [StaticKVCache(model.settings, len(ids), ids.shape[1] + 2)
              for _ in range(2)]
    with torch.no_grad():
        every = model(ids, mask, positions, cache=caches[0], last_only=True)[:, -1]
        once = prefill_once(model, ids, mask, positions, caches[1])
    assert (once - every).abs().max() <= 1e-5
    every_kv, once_kv = (c.keys + c.values for c in caches)
    for a, b in zip(every_kv, once_kv):
        assert (a - b).abs().max() <= 1e-5


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_greedy_tokens_identical_to_generate(name, prompts):
    hf, tok = load_model_and_tokenizer(CHECKPOINTS[name], dtype=torch.float32)
    ours = load_qwen2(CHECKPOINTS[name])
    stop = resolve_stop_token_ids(tok, hf)
    _, ids, mask = tokenize_prompts(tok, prompts, tok.pad_token_id)
    with torch.no_grad():
        expected = hf.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                               max_new_tokens=96, eos_token_id=stop,
                               pad_token_id=tok.pad_token_id)[:, ids.shape[1]:]
    rollout = generate_fast(ours, tok, prompts, max_new_tokens=96, do_sample=False)
    assert rollout.finished.any(), "no row reached a stop token: a weak test"
    assert torch.equal(rollout.completion_ids, expected), f"{name}: tokens differ"


@pytest.mark.parametrize("draw",
                         [sample_inverse_cdf, sample_race, sample_multinomial])
def test_fast_draws_give_each_token_its_probability(draw):
    probs = torch.tensor([0.5, 0.0, 0.3, 0.15, 0.05])
    logits = probs.log().expand(40_000, -1)  # log 0 = -inf: never drawn
    gen = torch.Generator().manual_seed(0)
    draws = draw(logits, generator=gen)
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    assert freq[1] == 0
    # 40,000 draws: the standard error of a share near 0.5 is 0.0025
    assert (freq - probs).abs().max() <= 0.01, freq
    nucleus = draw(logits, top_p=0.75, generator=gen)
    assert set(nucleus.tolist()) == {0, 2}  # 0.5 + 0.3 reach 0.75
    with pytest.raises(ValueError, match="temperature must be > 0"):
        draw(logits, temperature=0.0)
    tempered = draw(logits, temperature=0.5, generator=gen)
    sharp = probs ** 2 / (probs ** 2).sum()  # softmax(log p / 0.5)
    freq = torch.bincount(tempered, minlength=5).float() / len(tempered)
    assert (freq - sharp).abs().max() <= 0.01, freq


@pytest.mark.parametrize("sampler", ["inverse_cdf", "race"])
def test_seeded_fast_rollouts_repeat(prompts, sampler):
    model, tok = load_qwen2(CHECKPOINTS["tiny"]), build_tokenizer()
    kwargs = dict(num_generations=4, max_new_tokens=32, top_p=0.95,
                  decode_fn=functools.partial(decode_fast, sampler=sampler))
    a = generate(model, tok, prompts[:3], seed=3, **kwargs)
    b = generate(model, tok, prompts[:3], seed=3, **kwargs)
    c = generate(model, tok, prompts[:3], seed=4, **kwargs)
    assert torch.equal(a.completion_ids, b.completion_ids) and a.texts == b.texts
    assert not torch.equal(a.completion_ids, c.completion_ids)
    lengths = a.completion_mask.sum(1)
    assert (lengths >= 1).all() and a.completion_ids.shape[1] <= 32


def test_bfloat16_rollout_runs_and_mostly_agrees(prompts):
    hf, tok = load_model_and_tokenizer(CHECKPOINTS["tiny"])
    f32 = generate_fast(Qwen2.from_transformers(hf), tok, prompts, do_sample=False,
                        max_new_tokens=32)
    bf16 = generate_fast(Qwen2.from_transformers(hf.to(torch.bfloat16)), tok, prompts,
                         do_sample=False, max_new_tokens=32)
    assert bf16.completion_ids.shape[0] == f32.completion_ids.shape[0]
    agree = sum(a == b for a, b in zip(f32.texts, bf16.texts))
    assert agree >= len(prompts) // 2, (f32.texts, bf16.texts)


def test_this_torch_makes_exponential_numbers_from_float64_uniforms():
    """The identity sample_multinomial's speed rests on; if a torch release changes
    its CPU exponential_, this fails and sample_multinomial calls torch.multinomial."""
    assert exponential_is_rand()
    for shape in [(1, 3), (64, 512), (2, 151_936)]:
        ours, theirs = (torch.Generator().manual_seed(11) for _ in range(2))
        want = torch.empty(shape).exponential_(generator=theirs)
        assert torch.equal(exponential_from_rand(shape, ours), want)
        assert torch.equal(ours.get_state(), theirs.get_state())


@pytest.mark.parametrize("fallback", [False, True])
def test_sample_multinomial_draws_torch_multinomials_tokens(monkeypatch, fallback):
    if fallback:  # a torch where the identity fails: torch.multinomial itself
        monkeypatch.setattr("grpo_lib.fast_decode.exponential_is_rand", lambda: False)
    for seed in range(40):
        logits = torch.randn(64, 512, generator=torch.Generator().manual_seed(seed))
        if seed % 4 == 0:  # a vocabulary with entries of probability 0
            logits[:, 300:] = float("-inf")
        temperature, top_p = (0.7, 0.9) if seed % 2 else (1.0, 1.0)
        ours, theirs = (torch.Generator().manual_seed(seed) for _ in range(2))
        want = torch.multinomial(sampling_probs(logits, temperature, top_p), 1,
                                 generator=theirs).squeeze(-1)
        got = sample_multinomial(logits, temperature, top_p, ours)
        assert torch.equal(got, want), seed
        assert torch.equal(ours.get_state(), theirs.get_state()), seed
    torch.manual_seed(5)  # no generator: the default one, as torch.multinomial
    want = torch.multinomial(logits.softmax(-1), 1).squeeze(-1)
    torch.manual_seed(5)
    assert torch.equal(sample_multinomial(logits), want)


def test_sample_multinomial_refuses_what_torch_multinomial_refuses():
    logits = torch.zeros(3, 8)
    logits[1, 2] = float("nan")
    with pytest.raises(RuntimeError, match="not finite"):
        sample_multinomial(logits)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        sample_multinomial(torch.zeros(3, 8), temperature=0.0)


def test_multinomial_sampler_draws_the_standard_paths_tokens(prompts):
    """sampler="multinomial": the fast step with torch.multinomial samples the very
    tokens of the standard decode loop from the same seed (the logits agree to
    round-off, which flips no draw here)."""
    hf, tok = load_model_and_tokenizer(CHECKPOINTS["tiny"])
    kwargs = dict(num_generations=4, max_new_tokens=48, seed=3)
    standard = generate(hf, tok, prompts[:4], **kwargs)
    fast = generate(Qwen2.from_transformers(hf, share_weights=True), tok, prompts[:4],
                    decode_fn=functools.partial(decode_fast, sampler="multinomial"),
                    **kwargs)
    assert torch.equal(fast.completion_ids, standard.completion_ids)
    assert fast.texts == standard.texts
    with pytest.raises(ValueError, match="sampler='gumbel'; choose one of"):
        generate(load_qwen2(CHECKPOINTS["tiny"]), tok, prompts[:1], max_new_tokens=2,
                 decode_fn=functools.partial(decode_fast, sampler="gumbel"))


def test_fast_engine_with_multinomial_trains_the_standard_run(tmp_path):
    """rollout_engine="fast" + rollout_sampler="multinomial" trains what the
    transformers engine trains, step for step; a sampler with another engine is
    refused."""
    tok = build_tokenizer()
    runs = {}
    for engine, sampler in (("transformers", "multinomial"), ("fast", "multinomial")):
        config = GRPOConfig(output_dir=str(tmp_path / engine), per_step_prompts=2,
                            num_generations=4, max_completion_length=12, max_steps=3,
                            learning_rate=3e-2, progress_bar=False, sample_every=0,
                            seed=0, rollout_engine=engine, rollout_sampler=sampler)
        GRPOTrainer(random_model(tok, size="micro", seed=0), tok, [digit_share],
                    config, ROWS).train()
        runs[engine] = pd.read_csv(tmp_path / engine / "metrics.csv")
    columns = [c for c in runs["fast"].columns if not c.startswith("time_")]
    pd.testing.assert_frame_equal(runs["fast"][columns], runs["transformers"][columns])
    with pytest.raises(ValueError, match="read by rollout_engine='fast' only"):
        GRPOConfig(rollout_engine="transformers",
                   rollout_sampler="inverse_cdf").validate()
    assert GRPOConfig().rollout_sampler == "multinomial"
    GRPOConfig(rollout_sampler="inverse_cdf").validate()  # the default engine reads it


def test_decode_fast_refuses_use_cache_false(prompts):
    model, tok = load_qwen2(CHECKPOINTS["tiny"]), build_tokenizer()
    with pytest.raises(ValueError, match="use_cache=False use grpo_lib.sampling"):
        generate(model, tok, prompts[:1], max_new_tokens=4, use_cache=False,
                 decode_fn=decode_fast)



def test_fast_engine_trains_and_samples_with_the_latest_weights(tmp_path):
    tok = build_tokenizer()
    model = random_model(tok, size="micro", seed=0)
    config = GRPOConfig(output_dir=str(tmp_path / "fast"), per_step_prompts=2,
                        num_generations=4, max_completion_length=12, max_steps=3,
                        learning_rate=3e-2, progress_bar=False, sample_every=0,
                        seed=0, rollout_engine="fast")
    trainer = GRPOTrainer(model, tok, [digit_share], config, ROWS)
    trainer.train()
    metrics = pd.read_csv(tmp_path / "fast" / "metrics.csv")
    assert len(metrics) == 3 and metrics["loss"].notna().all()
    sampler, decode_fn = trainer._rollout_model()
    assert decode_fn.func is decode_fast
    assert decode_fn.keywords == {"sampler": "multinomial"}  # the default draw
    prompts = [r["prompt"] for r in ROWS]

    def greedy(m, fn=None):
        return generate(m, tok, prompts, do_sample=False, max_new_tokens=8,
                        decode_fn=fn).completion_ids

    assert torch.equal(greedy(sampler, decode_fast), greedy(model))
    with torch.no_grad():  # an in-place change, like an optimizer step
        model.model.embed_tokens.weight.mul_(-3.0)
    changed = greedy(model)
    assert torch.equal(greedy(sampler, decode_fast), changed), "stale weights"


def test_race_is_a_fast_engine_sampler():
    GRPOConfig(rollout_engine="fast", rollout_sampler="race").validate()
    with pytest.raises(ValueError, match="read by rollout_engine='fast' only"):
        GRPOConfig(rollout_engine="scratch", rollout_sampler="race").validate()


def test_sampling_probs_is_the_tempered_nucleus():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.15, 0.05]])
    torch.testing.assert_close(sampling_probs(probs.log()), probs)
    nucleus = sampling_probs(probs.log(), top_p=0.75)  # 0.5 + 0.3 reach 0.75
    torch.testing.assert_close(nucleus, torch.tensor([[0.625, 0, 0.375, 0, 0]]))
    sharp = sampling_probs(probs.log().bfloat16(), temperature=0.5)
    assert sharp.dtype == torch.float32
    torch.testing.assert_close(sharp, probs ** 2 / (probs ** 2).sum(), atol=2e-3,
                               rtol=0)
    with pytest.raises(ValueError, match="for greedy decoding take"):
        sampling_probs(probs, temperature=-1.0)
