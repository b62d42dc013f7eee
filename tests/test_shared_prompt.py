"""Tests for grpo_lib.shared_prompt: a group's prompt computed once gives the
log-probs, entropies and gradients of the usual forward (G copies of the prompt) to
round-off, on a transformers model (the gradients land in its parameters), on the
from-scratch Qwen2 and on a model with an untied output layer; the trainer's
``share_group_prompt`` makes the same first update; bad batches and configs are
refused."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from grpo_lib.logprobs import sequence_logprobs
from grpo_lib.models import build_tokenizer, load_model_and_tokenizer, random_model
from grpo_lib.qwen2 import load_qwen2
from grpo_lib.shared_prompt import group_logprobs, prompt_share
from grpo_lib.trainer import GRPOConfig, GRPOTrainer
from trainer_fixtures import ROWS, digit_share

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "data/models/tiny-qwen2-base"
N, G, P, C = 2, 4, 9, 12


def _batch(vocab=500, seed=0):
    """Two left-padded prompts (the first with 3 pads), G completions each, two of
    them ending early (right padding)."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, vocab, (N, P), generator=gen)
    prompt_mask = torch.ones(N, P, dtype=torch.long)
    prompt_mask[0, :3] = 0
    prompt[0, :3] = 0
    completion = torch.randint(3, vocab, (N * G, C), generator=gen)
    completion_mask = torch.ones(N * G, C)
    completion_mask[1, 7:] = 0
    completion_mask[6, 2:] = 0
    return prompt, prompt_mask, completion, completion_mask


def _untied():
    config = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config)


def _both(model, fn_a, fn_b):
    """(logp, entropy, grads) of two ways of computing the same log-probs."""
    weights = torch.randn(N * G, C, generator=torch.Generator().manual_seed(1))
    out = []
    for fn in (fn_a, fn_b):
        model.zero_grad()
        logp, entropy = fn()
        (logp * weights).sum().backward()
        out.append((logp.detach(), entropy.detach(),
                    {n: p.grad.clone() for n, p in model.named_parameters()
                     if p.grad is not None}))
    return out


@pytest.mark.parametrize("kind", ["transformers", "scratch", "untied"])
def test_group_logprobs_equal_the_usual_forward(kind):
    model = {"transformers": lambda: load_model_and_tokenizer(TINY)[0],
             "scratch": lambda: load_qwen2(TINY), "untied": _untied}[kind]()
    prompt, prompt_mask, completion, mask = _batch()
    usual, shared = _both(
        model,
        lambda: sequence_logprobs(model, prompt.repeat_interleave(G, 0),
                                  prompt_mask.repeat_interleave(G, 0), completion, mask,
                                  temperature=0.7, return_entropy=True)
        if kind != "scratch" else _scratch_usual(model, prompt, prompt_mask,
                                                 completion, mask),
        lambda: group_logprobs(model, prompt, prompt_mask, completion, mask,
                               temperature=0.7, return_entropy=True))
    assert (usual[0] - shared[0]).abs().max() <= 5e-5
    assert (usual[1] - shared[1]).abs().max() <= 5e-5
    assert (shared[0][mask == 0] == 0).all()
    assert usual[2].keys() == shared[2].keys() and usual[2]
    for name, g in usual[2].items():
        gap = (g - shared[2][name]).abs().max() / g.abs().max().clamp(min=1e-12)
        assert gap <= 1e-4, f"{kind}: gradient of {name} differs by {gap:.1e}"


def _scratch_usual(model, prompt, prompt_mask, completion, mask):
    """sequence_logprobs' computation with the from-scratch model's forward."""
    from grpo_lib.logprobs import entropy_from_logits, selective_log_softmax

    ids = torch.cat([prompt.repeat_interleave(G, 0), completion], 1)
    full = torch.cat([prompt_mask.repeat_interleave(G, 0), mask.long()], 1)
    logits = model(ids, full, (full.cumsum(-1) - 1).clamp(min=0))[:, P - 1:-1] / 0.7
    logp = selective_log_softmax(logits, completion).masked_fill(mask == 0, 0.0)
    return logp, entropy_from_logits(logits).masked_fill(mask == 0, 0.0)


def test_prompt_share_formula():
    assert prompt_share(23, 64, 8) == pytest.approx(7 * 23 / (8 * 87))
    assert prompt_share(10, 10, 1) == 0.0


def test_bad_batches_are_refused():
    model = load_qwen2(TINY)
    prompt, prompt_mask, completion, mask = _batch()
    with pytest.raises(ValueError, match="8 completion rows for 3 prompts"):
        group_logprobs(model, prompt[[0, 1, 1]], prompt_mask[[0, 1, 1]], completion,
                       mask)
    right = prompt_mask.flip(1)
    with pytest.raises(ValueError, match="left-padded"):
        group_logprobs(model, prompt, right, completion, mask)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=32,
                                         intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(ValueError, match="not a Qwen2 one"):
        group_logprobs(llama, prompt, prompt_mask, completion, mask)



def test_trainer_makes_the_same_first_update(tmp_path):
    tok = build_tokenizer()
    runs = {}
    start = torch.cat([p.detach().flatten()
                       for p in random_model(tok, size="micro", seed=0).parameters()])
    for shared in (False, True):
        model = random_model(tok, size="micro", seed=0)
        config = GRPOConfig(output_dir=str(tmp_path / str(shared)), per_step_prompts=2,
                            num_generations=4, max_completion_length=12, max_steps=1,
                            micro_batch_size=4, learning_rate=3e-2, progress_bar=False,
                            sample_every=0, seed=0, share_group_prompt=shared)
        GRPOTrainer(model, tok, [digit_share], config, ROWS).train()
        metrics = pd.read_csv(tmp_path / str(shared) / "metrics.csv")
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        runs[shared] = metrics.iloc[0], weights
    (m0, w0), (m1, w1) = runs[False], runs[True]
    assert m0["reward_std"] > 0, "no reward variance: a weak test"
    assert m1["loss"] == pytest.approx(m0["loss"], abs=1e-6)
    assert m1["grad_norm"] == pytest.approx(m0["grad_norm"], rel=1e-4)
    # Adam's first step is lr * g / (|g| + eps): round-off in a near-zero gradient
    # moves its weight by a little, so the bound is relative to the largest change
    change = (w0 - start).abs().max()
    assert change > 0 and (w1 - w0).abs().max() <= 1e-3 * change


def test_config_needs_whole_groups_per_micro_batch():
    with pytest.raises(ValueError, match="not a multiple of num_generations=8"):
        GRPOConfig(per_step_prompts=4, num_generations=8, micro_batch_size=4,
                   share_group_prompt=True).validate()
    GRPOConfig(per_step_prompts=4, num_generations=8, micro_batch_size=16,
               share_group_prompt=True).validate()


def test_bfloat16_on_a_cpu_attends_by_the_formula():
    """By default the attention is torch's fused kernel in float32 and qwen2's formula
    in bfloat16 on a CPU (the fused kernel is slow there); the bfloat16 log-probs are
    as close to float32's as those of the usual bfloat16 forward (transformers' fused
    kernel); a bad choice is refused."""
    model = load_model_and_tokenizer(TINY)[0]
    batch = _batch()
    reference = group_logprobs(model, *batch)
    assert torch.equal(reference, group_logprobs(model, *batch, attention="sdpa"))
    assert (reference - group_logprobs(model, *batch, attention="eager")).abs().max() \
        <= 5e-5
    half = model.to(torch.bfloat16)
    shared = group_logprobs(half, *batch)
    assert torch.equal(shared, group_logprobs(half, *batch, attention="eager"))
    prompt, prompt_mask, completion, mask = batch
    usual = sequence_logprobs(half, prompt.repeat_interleave(G, 0),
                              prompt_mask.repeat_interleave(G, 0), completion, mask)
    gap = (shared.float() - reference).abs()
    usual_gap = (usual.float() - reference).abs()
    assert 0 < gap.max() <= 1.5 * usual_gap.max()
    assert gap.mean() <= 1.5 * usual_gap.mean()
    with pytest.raises(ValueError, match="attention='flash'"):
        group_logprobs(model, *batch, attention="flash")
