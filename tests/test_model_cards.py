"""Exporting a run's checkpoint as a model folder with its card (grpo_lib.model_cards)."""
from __future__ import annotations

import pytest

from grpo_lib.cli import main


def test_export_copies_model_files_evaluates_and_writes_a_card(tmp_path, capsys):
    run = tmp_path / "run"
    main(["sft", "--config", "configs/sft_smoke.yaml", "--set", f"output_dir={run}",
          "--set", "max_steps=2", "--set", "save_steps=0", "--set", "save_final=true",
          "--set", "eval_steps=0", "--set", "progress_bar=false"])
    out = tmp_path / "model"
    main(["export", "--run", str(run), "--out", str(out), "--eval-n", "4",
          "--max-new-tokens", "8", "--command-line", "python -m grpo_lib sft ..."])
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md",
            "eval.csv"} <= names
    assert not {"optimizer.pt", "scheduler.pt", "rng_state.pt"} & names
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "python -m grpo_lib sft ..." in card and "| steps | 2 |" in card
    assert "strict_acc" in card and "first 4 problems" in card
    with pytest.raises(SystemExit) as stop:  # the folder is not empty any more
        main(["export", "--run", str(run), "--out", str(out)])
    assert stop.value.code == 2 and "already has files" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["export", "--run", str(tmp_path / "nothing"), "--out", str(tmp_path / "m")])
    assert stop.value.code == 2
