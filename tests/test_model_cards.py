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


def test_data_cell_names_each_file_of_a_mixture():
    from grpo_lib.model_cards import data_cell

    assert data_cell("data/a.jsonl") == "`data/a.jsonl`"
    assert data_cell(["data/a.jsonl", "data/b.jsonl"]) == \
        "`data/a.jsonl` + `data/b.jsonl`"
    assert data_cell(None) == "see the settings"


def test_add_skills_scores_the_card_and_rewrites_its_section(tmp_path, capsys):
    from grpo_lib.model_cards import SKILLS_MARKER, main as cards_main
    from grpo_lib.tasks import write_jsonl
    from grpo_lib.tasks.skills import make_skill_rows

    run = tmp_path / "run"
    main(["sft", "--config", "configs/sft_smoke.yaml", "--set", f"output_dir={run}",
          "--set", "max_steps=1", "--set", "save_steps=0", "--set", "save_final=true",
          "--set", "eval_steps=0", "--set", "progress_bar=false"])
    out = tmp_path / "model"
    main(["export", "--run", str(run), "--out", str(out), "--eval-n", "2",
          "--max-new-tokens", "4", "--command-line", "python -m grpo_lib sft ..."])
    skills = write_jsonl(make_skill_rows(2, seed=1, wordings="held_out"),
                         tmp_path / "s.jsonl")
    for _ in range(2):  # a second call replaces the section, it does not add one
        cards_main(["add-skills", str(out), "--skills-file", str(skills),
                    "--max-new-tokens", "4"])
    card = (out / "README.md").read_text(encoding="utf-8")
    assert card.count(SKILLS_MARKER) == 1 and "strict_acc" in card
    assert "self_cognition" in card and "s.jsonl" in card
    assert "|   2 |" in card  # n, a whole number
    assert (out / "skills.csv").read_text().startswith("skill,accuracy,n")
    checkpoint = next(run.glob("checkpoint-*"))  # no card: only the CSV
    cards_main(["add-skills", str(checkpoint), "--skills-file", str(skills),
                "--max-new-tokens", "2", "--csv", str(tmp_path / "ck.csv")])
    assert (tmp_path / "ck.csv").is_file() and not (checkpoint / "README.md").exists()
    with pytest.raises(SystemExit) as stop:
        cards_main(["add-skills", str(tmp_path / "nothing")])
    assert stop.value.code == 2 and "holds no model" in capsys.readouterr().err


def test_card_and_make_sft_data_report_setup_mistakes_in_one_line(tmp_path, capsys):
    """`card` on a folder that pretraining did not write (an exported model has no
    pretrain_info.json) and `make-sft-data` into a path that cannot be written stop
    with one line and status 2, as the README promises, not a traceback."""
    for argv, said in ((["card", str(tmp_path)], "pretrain_info.json is missing"),
                       (["make-sft-data", "--n", "2", "--out",
                         str(tmp_path / "file" / "rows.jsonl")], "file")):
        if argv[0] == "make-sft-data":
            (tmp_path / "file").write_text("not a folder")
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"python -m grpo_lib {argv[0]}: error:") and said in err
        assert len(err.splitlines()) == 1
