"""grpo_lib.trl_run: a whole run with TRL's GRPOTrainer, logged in our layout."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from grpo_lib.trainer import GRPOConfig  # noqa: E402
from grpo_lib.trl_run import TRL_LOG_KEYS, train_with_trl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def small_config(out, **changes) -> GRPOConfig:
    """Chapter 7's rewards and task on the committed tiny model, a few seconds a run."""
    values = dict(model_name_or_path=str(ROOT / "data/models/tiny-qwen2-base"),
                  reward_funcs=["accuracy_reward", "format_reward"],
                  reward_weights=[1.0, 0.1], per_step_prompts=2, num_generations=2,
                  max_completion_length=16, learning_rate=1e-3, max_steps=2,
                  eval_every=2, eval_on_start=True, eval_n=4, eval_batch_size=4,
                  save_every=1, output_dir=str(out), progress_bar=False, seed=3)
    values.update(changes)
    return GRPOConfig(**values)


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_a_trl_run_writes_our_run_folder(tmp_path):
    train_with_trl(small_config(tmp_path), command="test")
    rows = read_csv(tmp_path / "metrics.csv")
    assert [int(r["step"]) for r in rows] == [1, 2]
    for column in [*TRL_LOG_KEYS, "reward/accuracy_reward", "reward/format_reward",
                   "accuracy", "format_rate", "time_generate", "time_update"]:
        assert rows[0][column] != "", column
    for r in rows:
        gen, update, step = (float(r[k]) for k in
                             ("time_generate", "time_update", "time_step"))
        assert 0 < gen < step and update > 0
        assert gen + update == pytest.approx(step)
        # the weighted sum TRL logs is our weights applied to the logged means
        assert float(r["reward"]) == pytest.approx(
            float(r["accuracy"]) + 0.1 * float(r["format_rate"]), abs=1e-6)
        assert float(r["accuracy"]) == float(r["reward/accuracy_reward"])
    evals = read_csv(tmp_path / "eval.csv")
    assert [int(r["step"]) for r in evals] == [0, 2]
    assert all(float(r["n"]) == 4 for r in evals)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["grpo_lib"]["num_generations"] == 2
    assert config["trl"]["num_generations"] == 2
    assert config["trl"]["generation_batch_size"] == 4
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["steps"] == 2 and info["command"] == "test"
    assert info["trainer"].startswith("trl.GRPOTrainer")
    assert (tmp_path / "checkpoint-2" / "trainer_state.json").exists()


@pytest.mark.slow
def test_mini_batches_are_trls_optimizer_steps_and_ours_count_rollouts(tmp_path):
    """num_mini_batches=2: TRL takes two optimizer steps from each generation batch
    (steps_per_generation = 2 x gradient_accumulation_steps); metrics.csv still has
    one row per rollout."""
    config = small_config(tmp_path, num_mini_batches=2, eval_every=0,
                          eval_on_start=False, save_every=0)
    train_with_trl(config, command="test")
    assert [int(r["step"]) for r in read_csv(tmp_path / "metrics.csv")] == [1, 2]
    trl_config = json.loads((tmp_path / "config.json").read_text())["trl"]
    assert (trl_config["gradient_accumulation_steps"],
            trl_config["steps_per_generation"], trl_config["max_steps"]) == (1, 2, 4)
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["steps"] == 2


@pytest.mark.slow
def test_interrupt_saves_a_checkpoint_and_resume_finishes_the_run(tmp_path):
    """Ctrl-C after step 1 leaves checkpoint-1; resuming from it writes step 2, the
    same step 2 as a run that was never interrupted (same seed, same CPU)."""
    from transformers import TrainerCallback

    class CtrlC(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                raise KeyboardInterrupt

    whole, cut = tmp_path / "whole", tmp_path / "cut"
    train_with_trl(small_config(whole, save_every=0, eval_every=0,
                                eval_on_start=False))
    config = small_config(cut, save_every=0, eval_every=0, eval_on_start=False)
    with pytest.raises(KeyboardInterrupt):
        train_with_trl(config, callbacks=[CtrlC()])
    assert (cut / "checkpoint-1" / "trainer_state.json").exists()
    with pytest.raises(FileExistsError, match="resume_from_checkpoint=latest"):
        train_with_trl(config)  # a fresh run must not mix with the old checkpoints
    train_with_trl(config, resume_from_checkpoint="latest")
    got, want = read_csv(cut / "metrics.csv"), read_csv(whole / "metrics.csv")
    assert [int(r["step"]) for r in got] == [2]  # step 1's row was never written
    for column in ("reward", "loss", "grad_norm", "completion_length", "lr"):
        assert float(got[0][column]) == pytest.approx(float(want[1][column]),
                                                      rel=1e-5), column
    info = json.loads((cut / "run_info.json").read_text())
    assert info["resumed_from"].endswith("checkpoint-1")


def test_resume_needs_a_trl_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train_with_trl(small_config(tmp_path), resume_from_checkpoint="latest")
    (tmp_path / "checkpoint-5").mkdir()
    with pytest.raises(FileNotFoundError, match="not a TRL checkpoint"):
        train_with_trl(small_config(tmp_path), resume_from_checkpoint="latest")


@pytest.mark.parametrize("extra, message", [
    (["--trl", "bogus=1"], "not a trl.GRPOConfig field"),
    (["--set", "dynamic_sampling=true"], "dynamic_sampling=True"),
    (["--set", "num_generation=4"], "did you mean 'num_generations'"),
])
def test_cli_refuses_bad_settings_in_one_line(tmp_path, extra, message):
    cmd = [sys.executable, "-m", "grpo_lib", "trl-train", "--config",
           str(ROOT / "configs/r1_zero_arithmetic.yaml"), "--set",
           f"output_dir={tmp_path}", *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "metrics.csv").exists()
