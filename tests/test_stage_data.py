"""Data for the R1 pipeline's SFT stages: the cold-start annotator and the
non-reasoning skills (grpo_lib.tasks.cold_start, grpo_lib.tasks.skills)."""
from __future__ import annotations

import pytest

from grpo_lib import parsing
from grpo_lib.rewards import accuracy_reward, format_reward
from grpo_lib.tasks.arithmetic import evaluate_expression, make_problems
from grpo_lib.tasks.cold_start import annotate, cold_start_rows, order_rule
from grpo_lib.tasks.skills import (IDENTITY, SKILLS, make_skill_rows, number_to_chinese,
                                   number_to_words, score_skill)


def test_annotate_writes_the_worked_example():
    assert annotate("2 + 3 * 4") == (
        "<think> * comes before + and -. First 3 * 4 = 12, now 2 + 12. Then "
        "2 + 12 = 14. Check: 14 - 12 = 2. </think> <answer> 14 </answer>")


@pytest.mark.parametrize("question, rule", [
    ("2 + 3", "single"), ("2 + 3 - 4", "left_to_right"), ("2 + 3 * 4", "mul"),
    ("(2 + 3) * 4", "parens_and_mul"), ("(2 + 3) - 4", "parens")])
def test_order_rule_names_what_fixes_the_order(question, rule):
    assert order_rule(question) == rule


def test_every_annotated_trace_is_right_formatted_english_and_checks_out():
    problems = make_problems(300, seed=5)
    rows = cold_start_rows(problems)
    texts = [r["messages"][1]["content"] for r in rows]
    answers = [r["answer"] for r in rows]
    assert accuracy_reward(texts, answer=answers) == [1.0] * len(rows)
    assert format_reward(texts) == [1.0] * len(rows)
    assert not any(parsing.has_cjk(t) for t in texts)
    for p, text, row in zip(problems, texts, rows):
        check = text.split("Check: ")[1].split(".")[0]  # "14 - 12 = 2"
        left, right = check.split(" = ")
        if " / " in left:
            a, b = map(int, left.split(" / "))
            assert a == b * int(right)
        else:
            assert evaluate_expression(left) == int(right)
        assert row["messages"][0]["role"] == "user"
        assert p.question in row["messages"][0]["content"]


def test_annotate_refuses_a_bare_number():
    with pytest.raises(ValueError, match="at least one operation"):
        annotate("7")


@pytest.mark.parametrize("n, words, zh", [
    (0, "zero", "零"), (7, "seven", "七"), (10, "ten", "十"), (13, "thirteen", "十三"),
    (20, "twenty", "二十"), (47, "forty-seven", "四十七"), (99, "ninety-nine", "九十九")])
def test_number_words_in_english_and_chinese(n, words, zh):
    assert number_to_words(n) == words and number_to_chinese(n) == zh


def test_number_words_refuse_out_of_range():
    with pytest.raises(ValueError, match="0..99"):
        number_to_words(100)
    with pytest.raises(ValueError, match="0..99"):
        number_to_chinese(-1)


def test_skill_rows_have_their_answers_and_held_out_questions_differ():
    train = make_skill_rows(50, seed=0)
    held = make_skill_rows(50, seed=1, wordings="held_out")
    assert {r["skill"] for r in train} == set(SKILLS) and len(train) == 200
    for row in train + held:
        assert score_skill(row["skill"], row["answer"], row["answer"]) == 1.0
        assert row["messages"][1]["content"] == row["answer"]
    train_q = {r["question"] for r in train if r["skill"] == "self_cognition"}
    held_q = {r["question"] for r in held if r["skill"] == "self_cognition"}
    assert held_q and not train_q & held_q


@pytest.mark.parametrize("skill, completion, answer, score", [
    ("number_words", "Forty-seven.", "forty-seven", 1.0),
    ("number_words", "forty seven", "forty-seven", 1.0),
    ("number_words", "forty-eight", "forty-seven", 0.0),
    ("number_words", "The answer is forty-seven", "forty-seven", 0.0),
    ("compare", "83", "83", 1.0),
    ("compare", "38 or 83", "83", 0.0),
    ("translate", "四十七", "四十七", 1.0),
    ("translate", "四十", "四十七", 0.0),
    ("self_cognition", IDENTITY, IDENTITY, 1.0),
    ("self_cognition", "I am ChatGPT.", IDENTITY, 0.0),
    ("compare", None, "83", 0.0),
    ("no_such_skill", "83", "83", 0.0),
])
def test_score_skill(skill, completion, answer, score):
    assert score_skill(skill, completion, answer) == score


def test_writers_make_files_from_the_train_split_only(tmp_path):
    import json

    from grpo_lib.tasks.arithmetic import read_rows
    from grpo_lib.tasks.cold_start import write_cold_start
    from grpo_lib.tasks.skills import write_skills

    path = write_cold_start(tmp_path / "cs", n=200, seed=1)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    test_questions = {r["question"] for r in read_rows("test")}
    assert len(rows) == 200 and not {r["question"] for r in rows} & test_questions
    one_step = [r for r in read_rows("train") if r["num_operands"] == 2]
    assert len(one_step) < 200  # so every one of them is in the 200
    questions = {r["question"] for r in rows}
    assert all(r["question"] in questions for r in one_step)
    paths = write_skills(tmp_path / "sk", n_train=5, n_test=3)
    lines = paths["test"].read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 * len(SKILLS)
    with pytest.raises(ValueError, match="n must be in"):
        write_cold_start(tmp_path / "cs", n=0)


def test_evaluate_skills_scores_greedy_answers_of_a_real_model():
    import torch

    from grpo_lib.models import build_tokenizer, random_model
    from grpo_lib.tasks.skills import evaluate_skills

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    model = random_model(tokenizer, size="micro")
    rows = make_skill_rows(2, seed=0, wordings="held_out")
    table, samples = evaluate_skills(model, tokenizer, rows, max_new_tokens=4)
    assert list(table.index) == sorted(SKILLS) and table["n"].tolist() == [2] * 4
    assert len(samples) == 8 and set(samples["correct"]) <= {0.0, 1.0}
    with pytest.raises(ValueError, match="at least one row"):
        evaluate_skills(model, tokenizer, [])


def test_make_data_cli_writes_each_stage_and_refuses_bad_sizes(tmp_path, capsys):
    from grpo_lib.cli import main

    main(["make-data", "--stage", "skills", "--out", str(tmp_path / "sk"),
          "--n-train", "3", "--n-test", "2"])
    assert len((tmp_path / "sk" / "test.jsonl").read_text().splitlines()) == 8
    main(["make-data", "--stage", "cold-start", "--out", str(tmp_path / "cs"),
          "--n-train", "4"])
    assert len((tmp_path / "cs" / "annotator.jsonl").read_text().splitlines()) == 4
    for n, message in (("0", "--n-train: must be >= 1, got 0"),  # argparse's
                       ("20001", "n must be in 1..20000")):  # the writer's own check
        with pytest.raises(SystemExit) as stop:
            main(["make-data", "--stage", "cold-start", "--out", str(tmp_path / "x"),
                  "--n-train", n])
        assert stop.value.code == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_the_default_answer_length_fits_the_longest_skill_answer():
    import inspect

    from grpo_lib.models import build_tokenizer
    from grpo_lib.tasks.skills import evaluate_skills

    tokens = len(build_tokenizer()(IDENTITY)["input_ids"]) + 1  # + the stop token
    default = inspect.signature(evaluate_skills).parameters["max_new_tokens"].default
    assert tokens <= default


def test_training_wordings_are_many_and_never_the_held_out_ones():
    import re

    from grpo_lib.tasks.skills import HELD_OUT, NEW_WORDS, NEW_WORDS_KEYS, TEMPLATES

    def words(wording):
        return set(re.findall(r"[a-z]+", re.sub(r"\{\w\}", "", wording.casefold())))

    seen = set().union(*(words(t) for ts in TEMPLATES.values() for t in ts))
    for key, train in TEMPLATES.items():
        assert len(set(train)) >= 384
        # held out: new wordings, every word of which a training wording uses
        assert len(HELD_OUT[key]) >= 3
        for wording in HELD_OUT[key]:
            assert wording not in train and words(wording) <= seen, wording
        # new words: a word that no training wording uses
        assert any(w in NEW_WORDS[key].casefold() for w in NEW_WORDS_KEYS)
        assert words(NEW_WORDS[key]) - seen, NEW_WORDS[key]
        for wording in train:
            assert not any(w in wording.casefold() for w in NEW_WORDS_KEYS), wording
    rows = make_skill_rows(20, seed=3, wordings="new_words")
    assert {r["question"] for r in rows if r["skill"] == "self_cognition"} == {
        NEW_WORDS["self_cognition"]}
    with pytest.raises(ValueError, match="wordings"):
        make_skill_rows(1, wordings="unseen")