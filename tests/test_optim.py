"""Tests for grpo_lib.optim.CPUOffloadAdamW: the same updates as torch.optim.AdamW
(with a learning-rate schedule and gradient clipping), a state_dict that resumes a run
exactly, the trainer's optimizer_offload switch, and the memory it frees."""
from __future__ import annotations

import warnings

import pandas as pd
import pytest
import torch

from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.optim import CPUOffloadAdamW, offload_saving
from grpo_lib.trainer import GRPOConfig, GRPOTrainer
from grpo_lib.training_loop import lr_scheduler
from trainer_fixtures import ROWS, digit_share

KW = dict(lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 3))


def _steps(model, optimizer, n, start=0):
    scheduler = lr_scheduler(optimizer, 10, 2, "cosine")
    with warnings.catch_warnings():  # fast-forward the schedule of a resumed run
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(start):
            scheduler.step()
    dtype = next(model.parameters()).dtype
    for i in range(start, start + n):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(i))
        model(x.to(dtype)).float().pow(2).mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _reloaded(tmp_path, model, optimizer, new_model):
    """Save ``model`` and ``optimizer``, then load them as a new process would: a
    ``new_model()`` and a new optimizer built before the load. Returns both and the
    saved state."""
    torch.save({"model": model.state_dict(), "opt": optimizer.state_dict()},
               tmp_path / "ckpt.pt")
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    resumed = new_model()
    optimizer = CPUOffloadAdamW(resumed.parameters(), **KW)
    resumed.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["opt"])
    return resumed, optimizer, saved


def _whole_and_resumed(tmp_path, new_model, before, after):
    """A run of ``before + after`` steps, and the same run saved after ``before``
    steps and resumed in a new model and optimizer (:func:`_reloaded`). Returns the
    uninterrupted model, the resumed one and the saved state."""
    whole = new_model()
    _steps(whole, CPUOffloadAdamW(whole.parameters(), **KW), before + after)
    first = new_model()
    optimizer = CPUOffloadAdamW(first.parameters(), **KW)
    _steps(first, optimizer, before)
    resumed, optimizer, saved = _reloaded(tmp_path, first, optimizer, new_model)
    _steps(resumed, optimizer, after, start=before)
    return whole, resumed, saved


def test_same_updates_as_adamw():
    plain, offloaded = _model(), _model()
    _steps(plain, torch.optim.AdamW(plain.parameters(), **KW), 5)
    _steps(offloaded, CPUOffloadAdamW(offloaded.parameters(), **KW), 5)
    assert not torch.equal(_flat(plain), _flat(_model())), "nothing was trained"
    assert torch.allclose(_flat(plain), _flat(offloaded), atol=1e-7, rtol=0)


def test_state_dict_resumes_exactly(tmp_path):
    whole, resumed, _ = _whole_and_resumed(tmp_path, _model, 3, 2)
    assert torch.allclose(_flat(whole), _flat(resumed), atol=1e-7, rtol=0)


def test_state_dict_resumes_bfloat16_weights_exactly(tmp_path):
    """With bfloat16 weights the float32 masters hold bits the weights lack: the
    state carries them, so the resumed run is the uninterrupted one."""
    def bf16_model():
        return _model().to(torch.bfloat16)

    whole, resumed, saved = _whole_and_resumed(tmp_path, bf16_model, 3, 3)
    assert torch.equal(_flat(whole), _flat(resumed))
    rounded = dict(saved["opt"])  # a state without masters: rebuilt from bfloat16
    rounded.pop("masters")
    rebuilt = bf16_model()
    rebuilt.load_state_dict(resumed.state_dict())
    optimizer = CPUOffloadAdamW(rebuilt.parameters(), **KW)
    optimizer.load_state_dict(rounded)
    for master, weight in zip(optimizer.masters, rebuilt.parameters()):
        assert master.dtype == torch.float32
        assert torch.equal(master, weight.detach().float())  # the rounded weights
    with pytest.raises(ValueError, match="belongs to another model"):
        other = CPUOffloadAdamW(torch.nn.Linear(2, 2).parameters())
        other.load_state_dict(saved["opt"])


def test_parameter_groups_are_refused():
    with pytest.raises(ValueError, match="one list of parameters"):
        CPUOffloadAdamW([{"params": _model().parameters()}])


def test_offload_saving_counts_the_two_moments():
    assert offload_saving(1000) == 8000
    assert offload_saving(1000, torch.bfloat16) == 4000



def test_trainer_with_optimizer_offload_trains_like_adamw(tmp_path):
    tok = build_tokenizer()
    runs = {}
    for offload in (False, True):
        model = random_model(tok, size="micro", seed=0)
        config = GRPOConfig(output_dir=str(tmp_path / str(offload)), per_step_prompts=2,
                            num_generations=4, max_completion_length=12, max_steps=2,
                            learning_rate=3e-2, progress_bar=False, sample_every=0,
                            seed=0, optimizer_offload=offload)
        trainer = GRPOTrainer(model, tok, [digit_share], config, ROWS)
        trainer.train()
        assert isinstance(trainer.optimizer, CPUOffloadAdamW) == offload
        runs[offload] = pd.read_csv(tmp_path / str(offload) / "metrics.csv")
    assert runs[False]["reward_std"].max() > 0, "no reward variance: a weak test"
    pd.testing.assert_series_equal(runs[False]["loss"], runs[True]["loss"],
                                   atol=1e-6, rtol=0)
