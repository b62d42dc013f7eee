"""Cold-start source (b): R1-Zero traces filtered, one per question, tidied."""
from __future__ import annotations

import pytest

from grpo_lib.parsing import is_well_formatted
from grpo_lib.rejection import score_candidates
from grpo_lib.tasks.cold_start import (first_per_prompt, normalize_trace,
                                       r1_zero_rows)


def test_normalize_trace_tidies_whitespace_only():
    messy = " <think>3 * 4 = 12,\n 2 +  12 = 14\t</think>\n\n<answer>14 </answer> "
    tidy = "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>"
    assert normalize_trace(messy) == tidy
    assert normalize_trace(tidy) == tidy  # idempotent
    assert is_well_formatted(tidy)
    # no character other than whitespace is added or removed
    assert "".join(messy.split()) == "".join(tidy.split())


def test_normalize_trace_keeps_words_and_other_scripts():
    text = "<think> 3 * 4 = 12，再 2 + 12 = 14 </think> <answer> 14 </answer>"
    assert normalize_trace(text) == text


@pytest.mark.parametrize("bad", [
    "3 * 4 = 12, so 14",
    "<think> 12 </think> <answer> 14 </answer> and more",
    "<think> 12 </think>",
    None,
])
def test_normalize_trace_rejects_malformed_text(bad):
    with pytest.raises(ValueError, match="filter by format first"):
        normalize_trace(bad)


ROWS = [{"question": "2 + 3 * 4", "answer": "14"}, {"question": "5 - 1", "answer": "4"},
        {"question": "2 * 2", "answer": "4"}]
SAMPLES = [
    # question 0: a wrong one, a language-mixed one, then two copies of a good one
    "<think> 2 + 3 = 5, 5 * 4 = 20 </think> <answer> 20 </answer>",
    "<think> 3 * 4 = 12 再 2 + 12 = 14 </think> <answer> 14 </answer>",
    "<think>3 * 4 = 12,\n2 + 12 = 14</think> <answer>14</answer>",
    "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>",
    # question 1: right but unformatted, right and formatted twice, a bare number
    "5 - 1 = 4", "<think> 5 - 1 = 4 </think> <answer> 4 </answer>",
    "<think> 5 - 1 = 4 </think> <answer> 4 </answer>", "4",
    # question 2: never right
    "<think> 2 * 2 = 5 </think> <answer> 5 </answer>", "5", "22", "0",
]


def test_r1_zero_rows_yield_table_and_rows():
    candidates = score_candidates(ROWS, 4, SAMPLES)
    rows, yields = r1_zero_rows(candidates)
    assert list(yields.index) == ["sampled", "correct", "formatted", "single_language",
                                  "non_repetitive", "not_truncated", "deduplicate",
                                  "one_per_question"]
    # correct is strict (inside <answer>), so "5 - 1 = 4" is not; deduplicate drops
    # question 1's copy (question 0's two good ones differ in the space after <think>)
    assert yields["kept"].tolist() == [12, 5, 5, 4, 4, 4, 3, 2]
    assert yields.loc["one_per_question", "prompts"] == 2
    assert yields.loc["deduplicate", "dropped"] == 1  # 1 copy of question 1's trace
    assert [r["question"] for r in rows] == ["2 + 3 * 4", "5 - 1"]
    # question 0's first surviving sample is the untidy one, tidied
    assert rows[0]["messages"][1]["content"] == SAMPLES[3]
    assert rows[0]["normalized"] is True and rows[1]["normalized"] is False
    assert rows[0]["messages"][0] == {"role": "user", "content": "What is 2 + 3 * 4?"}
    assert {r["source"] for r in rows} == {"r1_zero"}


def test_first_per_prompt_takes_the_lowest_sample_index():
    candidates = score_candidates(ROWS, 4, SAMPLES)
    shuffled = candidates.sample(frac=1.0, random_state=0)
    first = first_per_prompt(shuffled)
    assert sorted(zip(first["prompt_index"], first["sample_index"])) == [
        (0, 0), (1, 0), (2, 0)]


def test_r1_zero_rows_label_the_source_they_are_given():
    # the same filters on another model's answers (chapter 11's base_self)
    rows, _ = r1_zero_rows(score_candidates(ROWS, 4, SAMPLES), source="base_self")
    assert {r["source"] for r in rows} == {"base_self"}


def test_the_cli_writes_the_label_it_is_given(tmp_path):
    # end to end on the committed base model: 4 easy questions, 4 samples each
    import json
    from pathlib import Path

    from grpo_lib.tasks.cold_start import main

    base = Path(__file__).resolve().parents[1] / "data" / "models" / "tiny-qwen2-base"
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n"
                                 for q, a in [("2 + 6", "8"), ("9 - 4", "5"),
                                              ("3 * 3", "9"), ("7 + 1", "8")]))
    out = tmp_path / "self.jsonl"
    main(["r1-zero", "--model", str(base), "--questions", str(questions),
          "--out", str(out), "--source", "base_self"])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows, "the base model should get some of these right"
    assert {r["source"] for r in rows} == {"base_self"}
    assert (tmp_path / "self_yield.csv").is_file()
