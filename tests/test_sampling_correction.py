"""Tests for the importance-sampling correction of the sampler/trainer numerics gap
(``grpo_lib.losses.sampling_importance_weights``, TRL's
``vllm_importance_sampling_correction``): the four modes on numbers a reader can check,
the weights' place in the loss, the fast sampler's own log-probs against the trainer's,
and the trainer's switch with its errors."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from grpo_lib.fast_decode import generate_fast
from grpo_lib.logprobs import sequence_logprobs
from grpo_lib.losses import policy_loss, sampling_importance_weights
from grpo_lib.models import build_tokenizer, load_model_and_tokenizer, random_model
from grpo_lib.qwen2 import Qwen2
from grpo_lib.tasks import load_task_split
from grpo_lib.trainer import GRPOConfig, GRPOTrainer
from trainer_fixtures import ROWS, digit_share

TINY = Path(__file__).resolve().parents[1] / "data/models/tiny-qwen2-base"

# two completions of three tokens; the second's last token is padding
TRAINER = torch.tensor([[0.5, 0.2, 0.9], [0.8, 0.8, 0.3]]).log()
SAMPLER = torch.tensor([[0.25, 0.4, 0.9], [0.2, 0.4, 0.01]]).log()
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
# token ratios pi_old / mu: [[2, 0.5, 1], [4, 2, (padding: 1)]]; products 1 and 8


@pytest.mark.parametrize("mode, expected", [
    ("token_truncate", [[2.0, 0.5, 1.0], [3.0, 2.0, 1.0]]),
    ("token_mask", [[2.0, 0.5, 1.0], [0.0, 2.0, 1.0]]),
    ("sequence_truncate", [[1.0], [3.0]]),
    ("sequence_mask", [[1.0], [0.0]]),
])
def test_modes_by_hand(mode, expected):
    w = sampling_importance_weights(TRAINER, SAMPLER, MASK, mode, clip_max=3.0)
    assert torch.allclose(w, torch.tensor(expected), atol=1e-5)


def test_lower_bound_and_open_sides():
    w = sampling_importance_weights(TRAINER, SAMPLER, MASK, "token_mask",
                                    clip_min=0.6, clip_max=None)
    assert torch.allclose(w, torch.tensor([[2.0, 0.0, 1.0], [4.0, 2.0, 1.0]]))
    w = sampling_importance_weights(TRAINER, SAMPLER, MASK, "token_truncate",
                                    clip_min=0.6, clip_max=None)
    assert torch.allclose(w, torch.tensor([[2.0, 0.6, 1.0], [4.0, 2.0, 1.0]]))


def test_weights_are_detached_and_nan_means_no_correction():
    logp = TRAINER.clone().requires_grad_(True)
    sampler = SAMPLER.clone()
    sampler[0, 1] = math.nan  # a log-prob the sampler could not give
    w = sampling_importance_weights(logp, sampler, MASK, "token_truncate")
    assert not w.requires_grad
    assert w[0, 1] == 1.0 and torch.isfinite(w).all()


def test_bad_mode_and_shapes():
    with pytest.raises(ValueError, match="mode='token'; choose one of"):
        sampling_importance_weights(TRAINER, SAMPLER, MASK, "token")
    with pytest.raises(ValueError, match="must match"):
        sampling_importance_weights(TRAINER, SAMPLER[:, :2], MASK)


def test_the_weights_multiply_the_per_token_loss():
    logp = TRAINER.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -0.5])
    plain, _ = policy_loss(logp, None, adv, MASK, loss_type="dapo")
    ones, _ = policy_loss(logp, None, adv, MASK, loss_type="dapo",
                          sampling_weights=torch.ones(2, 1))
    twice, _ = policy_loss(logp, None, adv, MASK, loss_type="dapo",
                           sampling_weights=torch.full((2, 3), 2.0))
    assert ones.item() == pytest.approx(plain.item())
    assert twice.item() == pytest.approx(2 * plain.item())
    dropped, _ = policy_loss(logp, None, adv, MASK, loss_type="dapo",
                             sampling_weights=torch.tensor([[1.0], [0.0]]))
    dropped.backward()
    assert (logp.grad[1] == 0).all() and (logp.grad[0] != 0).all()


def test_fast_sampler_logprobs_are_the_trainers_in_float32():
    hf, tok = load_model_and_tokenizer(TINY)
    prompts = load_task_split("arithmetic", "test")["prompt"][:4]
    rollout = generate_fast(Qwen2.from_transformers(hf, share_weights=True), tok,
                            prompts, num_generations=3, max_new_tokens=40,
                            temperature=0.8, seed=0)
    assert rollout.sampler_logprobs is not None
    with torch.no_grad():
        trainer = sequence_logprobs(hf, rollout.prompt_ids, rollout.prompt_mask,
                                    rollout.completion_ids, rollout.completion_mask,
                                    temperature=0.8)
    mask = rollout.completion_mask.bool()
    assert (rollout.sampler_logprobs[~mask] == 0).all()
    assert (trainer - rollout.sampler_logprobs)[mask].abs().max() <= 1e-4
    assert (rollout.sampler_logprobs[mask] < 0).any()



def test_trainer_logs_weights_near_one_in_float32(tmp_path):
    tok = build_tokenizer()
    model = random_model(tok, size="micro", seed=0)
    config = GRPOConfig(output_dir=str(tmp_path), per_step_prompts=2, num_generations=4,
                        max_completion_length=12, max_steps=2, learning_rate=3e-2,
                        progress_bar=False, sample_every=0, seed=0,
                        rollout_engine="fast", sampling_correction=True,
                        sampling_correction_mode="token_truncate")
    GRPOTrainer(model, tok, [digit_share], config, ROWS).train()
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert metrics["loss"].notna().all()
    assert (metrics["sampling_weight_mean"] - 1).abs().max() <= 1e-3
    assert metrics["sampling_logp_gap_max"].max() <= 1e-3


def test_config_errors():
    with pytest.raises(ValueError, match="only rollout_engine='fast' returns"):
        GRPOConfig(sampling_correction=True, rollout_engine="transformers").validate()
    GRPOConfig(sampling_correction=True).validate()  # the default engine returns them
    with pytest.raises(ValueError, match="sampling_correction_mode='tokens'"):
        GRPOConfig(sampling_correction=True, rollout_engine="fast",
                   sampling_correction_mode="tokens").validate()
    with pytest.raises(ValueError, match="need 0 <= min < max"):
        GRPOConfig(sampling_correction=True, rollout_engine="fast",
                   sampling_correction_clip_min=2.0,
                   sampling_correction_clip_max=1.0).validate()
