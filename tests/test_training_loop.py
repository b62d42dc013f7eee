"""grpo_lib.training_loop and grpo_lib.checkpoints: the machinery the trainers share.

GRPO and SFT runs check it in test_trainer.py and test_sft.py; here are its pieces by
hand, and pretraining (the third user) stopped with Ctrl-C and resumed.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
import torch

from grpo_lib.checkpoints import checkpoint_dirs, resolve_checkpoint
from grpo_lib.training_loop import (
    append_metrics_row,
    guarded_optimizer_step,
    lr_multiplier,
    truncate_logs,
)


def test_lr_multiplier_floor():
    # cosine from 1 down to the floor m = 0.1: halfway is 0.1 + 0.9 * 0.5
    assert lr_multiplier(6, 11, 1, "cosine", min_lr_rate=0.1) == pytest.approx(0.55)
    assert lr_multiplier(10, 10, 0, "linear", min_lr_rate=0.2) == pytest.approx(0.2)
    assert lr_multiplier(0, 10, 4, "cosine", min_lr_rate=0.5) == 0.25  # warm-up


def test_guard_skips_a_nonfinite_gradient():
    layer = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: 1.0)
    before = layer.weight.detach().clone()
    (layer(torch.tensor([[float("inf"), 1.0]])).sum()).backward()
    norm, problem = guarded_optimizer_step(layer, optimizer, scheduler, 1.0)
    assert problem == f"the gradient norm is {norm}" and scheduler.last_epoch == 0
    assert torch.equal(layer.weight, before) and layer.weight.grad is None
    (layer(torch.tensor([[3.0, 4.0]])).sum()).backward()
    norm, problem = guarded_optimizer_step(layer, optimizer, scheduler, 1.0)
    assert problem is None and norm == pytest.approx((9 + 16 + 1) ** 0.5)
    assert not torch.equal(layer.weight, before) and scheduler.last_epoch == 1


def test_logs_follow_their_header_and_are_cut_back_on_resume(tmp_path):
    path = tmp_path / "metrics.csv"
    for step in (1, 2, 3):
        append_metrics_row(path, {"step": step, "loss": step / 10, "new": 1}, ["step",
                                                                             "loss"])
    (tmp_path / "samples.jsonl").write_text(
        "".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    truncate_logs(tmp_path, ["metrics.csv", "samples.jsonl", "eval.csv"], step=2)
    table = pd.read_csv(path)
    assert list(table.columns) == ["step", "loss"] and table["step"].tolist() == [1, 2]
    assert (tmp_path / "samples.jsonl").read_text().count("\n") == 2


def test_checkpoint_folders_and_latest(tmp_path):
    for name in ("checkpoint-10", "checkpoint-9", "checkpoint-best", "checkpoint-2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text("{}")
    assert [p.name for p in checkpoint_dirs(tmp_path)] == [
        "checkpoint-2", "checkpoint-9", "checkpoint-10"]
    assert resolve_checkpoint("latest", tmp_path).name == "checkpoint-10"
    with pytest.raises(FileNotFoundError, match="not a checkpoint"):
        resolve_checkpoint(tmp_path, tmp_path)
    with pytest.raises(FileNotFoundError, match="has no checkpoint-<step> folder"):
        resolve_checkpoint("latest", tmp_path / "empty")


def test_pretraining_stopped_by_ctrl_c_resumes_exactly(tmp_path, capsys):
    """Pretraining runs on the same loop: Ctrl-C after step 2 leaves checkpoint-2 next
    to the model folder; resuming gives the uninterrupted run's weights and log."""
    from safetensors.torch import load_file

    from grpo_lib.pretrain import PretrainConfig, Pretrainer, pretrain

    cfg = PretrainConfig(size="micro", steps=4, batch_size=4, log_every=1,
                         progress=False)
    full = pretrain(cfg, tmp_path / "full", eval_n=0)

    def ctrl_c_after_step_two(trainer, metrics):
        if trainer.step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Pretrainer(cfg, tmp_path / "m", callbacks=[ctrl_c_after_step_two]).train()
    assert "Interrupted: saved" in capsys.readouterr().out
    assert [p.name for p in checkpoint_dirs(tmp_path / "m.tmp")] == ["checkpoint-2"]
    with pytest.raises(FileExistsError, match="resume_from_checkpoint=latest"):
        Pretrainer(cfg, tmp_path / "m")  # a fresh run would mix with it
    with pytest.raises(ValueError, match=r"steps=4 \(now 8\).*repeat some documents"):
        Pretrainer(replace(cfg, steps=8, resume_from_checkpoint="latest"),
                   tmp_path / "m").train()  # another corpus: refused, not mixed
    out = pretrain(replace(cfg, resume_from_checkpoint="latest"), tmp_path / "m",
                   eval_n=0)
    assert not (tmp_path / "m.tmp").exists() and not checkpoint_dirs(out)
    weights, expected = load_file(out / "model.safetensors"), load_file(
        full / "model.safetensors")
    assert all(torch.equal(weights[k], expected[k]) for k in expected)
    log, full_log = pd.read_csv(out / "pretrain_log.csv"), pd.read_csv(
        full / "pretrain_log.csv")
    assert log["step"].tolist() == [1, 2, 3, 4]
    assert log[["loss", "lr", "tokens_seen"]].equals(full_log[["loss", "lr",
                                                               "tokens_seen"]])
    info = json.loads((out / "pretrain_info.json").read_text())
    assert info["tokens_seen"] == int(full_log["tokens_seen"].iloc[-1])
