"""grpo_lib.async_rl: the rollout worker, bounded staleness, the decoupled objective
and a worker killed mid-run."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from grpo_lib.async_rl import AsyncConfig, AsyncGRPOTrainer, batch_rows
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.tasks import load_task_split
from grpo_lib.trainer import GRPOConfig, GRPOTrainer

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "data/models/tiny-qwen2-base"


def small_config(out, **changes) -> GRPOConfig:
    values = dict(model_name_or_path=str(MODEL), per_step_prompts=2,
                  num_generations=4, max_completion_length=64, learning_rate=2e-3,
                  reward_funcs=["accuracy_reward", "format_reward"],
                  reward_weights=[1.0, 0.1],
                  max_steps=3, seed=5, output_dir=str(out), progress_bar=False,
                  sample_every=0, save_every=0)
    values.update(changes)
    return GRPOConfig(**values)


def train_rows():
    return load_task_split("arithmetic", "train").select(range(40))


def run(config, async_config=None, callbacks=None, sync=False):
    model, tokenizer = load_model_and_tokenizer(MODEL)
    if sync:
        trainer = GRPOTrainer(model, tokenizer, None, config, train_rows())
    else:
        trainer = AsyncGRPOTrainer(model, tokenizer, None, config, train_rows(),
                                   callbacks=callbacks, async_config=async_config)
    return trainer.train(), trainer


def test_worker_rows_follow_the_trainers_data_order():
    rows = [{"question": str(i)} for i in range(10)]  # 3 rows a batch: crosses epochs

    class Loop(GRPOTrainer):
        def __init__(self):  # only what _next_rows reads
            from grpo_lib.training_loop import RunSettings

            self.train_rows, self.epoch, self.position = rows, 0, 0
            self.run_settings = RunSettings(output_dir=".", max_steps=1, seed=7)

    loop = Loop()
    for index in range(8):
        assert batch_rows(rows, 7, index, 3) == loop._next_rows(3), index


@pytest.mark.slow
def test_synchronous_eta_zero_is_the_synchronous_trainer(tmp_path):
    """η = 0 with the plain objective: the worker samples batch s with version s,
    drawing the same tokens as our trainer, so the run is the synchronous run."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the worker's count: the same round-off
    try:
        sync, _ = run(small_config(tmp_path / "sync"), sync=True)
        got, trainer = run(small_config(tmp_path / "async"),
                           AsyncConfig(max_staleness=0, objective="ignore"))
    finally:
        torch.set_num_threads(threads)
    assert list(got["staleness"]) == [0, 0, 0]
    for column in ("reward", "completion_length", "loss", "grad_norm", "accuracy"):
        np.testing.assert_allclose(got[column], sync[column], rtol=1e-5, atol=1e-7,
                                   err_msg=column)
    assert trainer._worker is None  # stopped when training ended


@pytest.mark.slow
def test_bounded_staleness_and_decoupled_weights(tmp_path):
    config = small_config(tmp_path, max_steps=5)
    got, _ = run(config, AsyncConfig(max_staleness=2, objective="decoupled"))
    assert list(got["step"]) == [1, 2, 3, 4, 5]
    assert got["staleness"].between(0, 2).all()
    assert got["staleness"].max() > 0  # the worker did sample ahead of the trainer
    # π_prox / π_behav: 1 (to round-off) on a fresh batch, away from 1 on stale ones
    fresh, stale = got[got["staleness"] == 0], got[got["staleness"] > 0]
    assert (fresh["sampling_logp_gap_max"] < 1e-4).all()
    assert stale["sampling_logp_gap_max"].max() > 1e-2
    assert (got["sampling_weight_max"] <= 5.0 + 1e-6).all()  # the cap
    assert got["loss"].notna().all() and np.isfinite(got["grad_norm"]).all()


@pytest.mark.slow
def test_a_killed_worker_is_restarted_and_no_step_is_lost(tmp_path):
    def kill_worker(trainer, metrics):
        if trainer.step == 2:
            os.kill(trainer._worker.pid, signal.SIGKILL)

    config = small_config(tmp_path, max_steps=5)
    got, trainer = run(config, AsyncConfig(max_staleness=1), callbacks=[kill_worker])
    assert list(got["step"]) == [1, 2, 3, 4, 5]
    assert got["worker_restarts"].iloc[-1] == 1
    assert got["staleness"].between(0, 1).all()
    written = pd.read_csv(tmp_path / "metrics.csv")
    assert list(written["step"]) == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_a_worker_that_cannot_start_stops_the_run(tmp_path, monkeypatch):
    import grpo_lib.async_rl as async_rl

    config = small_config(tmp_path, max_steps=2)
    model, tokenizer = load_model_and_tokenizer(MODEL)
    trainer = AsyncGRPOTrainer(model, tokenizer, None, config, train_rows(),
                               async_config=AsyncConfig(max_staleness=1))
    trainer._policy_file = tmp_path / "missing" / "policy.pt"
    monkeypatch.setattr(async_rl, "publish_policy", lambda *a: None)  # never written
    monkeypatch.setattr(async_rl, "MAX_RESTARTS_IN_A_ROW", 1)
    with pytest.raises(RuntimeError, match="died 2 times in a row"):
        trainer.train()
    assert trainer._worker is None


@pytest.mark.parametrize("changes, message", [
    (dict(max_staleness=-1), "max_staleness=-1"),
    (dict(objective="ppo"), "objective='ppo'"),
    (dict(behaviour_weight_cap=0.5), "behaviour_weight_cap"),
    (dict(behaviour_weight_mode="sequence_mask"), "behaviour_weight_mode"),
])
def test_bad_async_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        AsyncConfig(**changes).validate()


@pytest.mark.parametrize("changes, message", [
    (dict(num_iterations=2), "num_iterations=2"),
    (dict(num_mini_batches=2), "num_mini_batches=2"),
    (dict(dynamic_sampling=True), "dynamic_sampling"),
    (dict(model_name_or_path="nowhere/model"), "saved folder"),
])
def test_configs_the_async_trainer_cannot_run_are_refused(tmp_path, changes, message):
    model, tokenizer = load_model_and_tokenizer(MODEL)
    with pytest.raises(ValueError, match=message):
        AsyncGRPOTrainer(model, tokenizer, None, small_config(tmp_path, **changes),
                         train_rows())


def test_a_worker_killed_at_any_moment_leaves_no_lock_held(tmp_path):
    """The version counter and the stop flag are shared without a lock: a worker
    killed while holding a lock (it reads the counter every 2 ms) left it held, and
    the next worker and the trainer then waited on it forever (seen once in CI)."""
    model, tokenizer = load_model_and_tokenizer(MODEL)
    trainer = AsyncGRPOTrainer(model, tokenizer, None, small_config(tmp_path),
                               train_rows())
    trainer._start_worker()
    try:
        for shared in (trainer._published, trainer._stop):
            assert not hasattr(shared, "get_lock"), "a lock a killed worker can hold"
        os.kill(trainer._worker.pid, signal.SIGKILL)
        trainer._worker.join(timeout=10)
        trainer._published.value = 3  # the trainer publishes and stops without waiting
        trainer._stop_worker()
        assert trainer._worker is None
    finally:
        if trainer._worker is not None:
            trainer._worker.kill()


@pytest.mark.slow
def test_vespo_trains_on_stale_batches(tmp_path):
    """VESPO's weights fold the behaviour weights pi_prox / pi_behav in token by
    token (the async trainer's default token_truncate mode) and train on them."""
    config = small_config(tmp_path, max_steps=4, loss_type="vespo")
    got, trainer = run(config, AsyncConfig(max_staleness=2, objective="decoupled"))
    assert trainer.config.sampling_correction_mode == "token_truncate"
    assert list(got["step"]) == [1, 2, 3, 4] and got["staleness"].max() > 0
    assert got["loss"].notna().all() and np.isfinite(got["grad_norm"]).all()


@pytest.mark.parametrize("mode", ["token_truncate", "token_mask"])
def test_the_behaviour_weight_mode_reaches_the_sampling_correction(tmp_path, mode):
    model, tokenizer = load_model_and_tokenizer(MODEL)
    trainer = AsyncGRPOTrainer(model, tokenizer, None, small_config(tmp_path),
                               train_rows(),
                               async_config=AsyncConfig(behaviour_weight_mode=mode))
    assert trainer.config.sampling_correction
    assert trainer.config.sampling_correction_mode == mode
    assert trainer.config.sampling_correction_clip_max == 5.0
