"""SFT on a data mixture: ``train_file`` as a list of JSONL files (grpo_lib.sft)."""
from __future__ import annotations

import pytest

from grpo_lib.sft import SFTConfig, read_jsonl, read_train_files, trainer_from_yaml
from grpo_lib.tasks import write_jsonl

CHAT = "data/sft/arithmetic_r1_chat.jsonl"
SKILLS = [{"messages": [{"role": "user", "content": "Write 7 in words."},
                        {"role": "assistant", "content": "seven"}],
           "skill": "number_words", "question": "Write 7 in words.", "answer": "seven"}]


def test_a_list_of_files_is_their_rows_in_order(tmp_path):
    skills = write_jsonl(SKILLS * 3, tmp_path / "skills.jsonl")
    config = SFTConfig(assistant_only_loss=True)
    one = read_train_files(CHAT, config)
    assert one == read_jsonl(CHAT)
    mixed = read_train_files([CHAT, str(skills)], config)
    assert mixed == one + SKILLS * 3
    twice = read_train_files([str(skills), str(skills)], config)  # weigh a file twice
    assert len(twice) == 6


def test_the_yaml_override_takes_a_list_and_the_trainer_sees_every_row(tmp_path):
    skills = write_jsonl(SKILLS * 5, tmp_path / "skills.jsonl")
    trainer = trainer_from_yaml("configs/sft_smoke.yaml", [
        f"train_file=[{CHAT}, {skills}]", f"output_dir={tmp_path / 'run'}",
        "max_steps=1", "progress_bar=false", "eval_steps=0", "save_steps=0"])
    assert len(trainer.train_rows) == len(read_jsonl(CHAT)) + 5
    trainer.train()
    assert trainer.step == 1


@pytest.mark.parametrize("bad, message", [
    ([], "non-empty list"),
    ([CHAT, 3], "non-empty list"),
    (7, "non-empty list"),
    ([CHAT, "data/no_such_file.jsonl"], "no data file at data/no_such_file.jsonl"),
])
def test_bad_lists_are_refused_with_one_line(bad, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        read_train_files(bad, SFTConfig(assistant_only_loss=True))


def test_each_file_is_checked_and_named(tmp_path):
    no_assistant = [{"messages": [{"role": "user", "content": "hi"}]}]
    bad = write_jsonl(no_assistant, tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match=r"train_file .*bad\.jsonl row 0"):
        read_train_files([CHAT, str(bad)], SFTConfig(assistant_only_loss=True))


def test_the_cli_answers_a_missing_file_in_the_list_with_one_line(tmp_path, capsys):
    from grpo_lib.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["sft", "--config", "configs/sft_smoke.yaml", "--set",
              f"train_file=[{CHAT}, {tmp_path / 'missing.jsonl'}]",
              "--set", f"output_dir={tmp_path / 'run'}"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "missing.jsonl" in err and len(err.strip().splitlines()) == 1
