"""Tests for grpo_lib.rejection: the filters on hand-written candidates with known
yields, the per-prompt cap, the random control, the SFT rows, argument checks, and one
end-to-end sampling call on a tiny random Qwen2 (structure only)."""
from __future__ import annotations

import argparse
import json
import time

import pandas as pd
import pytest

from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.rejection import (
    COUNTDOWN_FILTERS,
    DEFAULT_FILTERS,
    YIELD_COLUMNS,
    add_rejection_parser,
    apply_filters,
    cap_per_prompt,
    default_filters,
    normalise_completion,
    random_control,
    readable_words,
    sample_candidates,
    score_candidates,
    steps_check_out,
    to_sft_rows,
    uses_known_words,
    with_task_columns,
)
from grpo_lib.sft import read_jsonl
from grpo_lib.tasks import load_task_split, write_jsonl
from grpo_lib.tasks.countdown import countdown_prompt

ROWS = [
    {"question": "2 + 3 * 4", "answer": "14"},
    {"question": "5 - 1", "answer": "4"},
    {"question": "7 * 2", "answer": "14"},
    {"question": "9 - 3", "answer": "6"},
]
K = 4
# (completion, length in tokens, finished); what drops it, if anything
CANDIDATES = [
    # prompt 0: 2 + 3 * 4 = 14
    ("<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>", 20, True),
    ("<think> 2 + 3 = 5, 5 * 4 = 20 </think> <answer> 20 </answer>", 20, True),  # wrong
    ("<think> 3 * 4 = 12, 然后 2 + 12 = 14 </think> <answer> 14 </answer>", 22,
     True),  # Chinese
    ("<think> * comes before + and -. First 3 * 4 = 12, now 2 + 12. Then 2 + 12 = 14. "
     "</think> <answer> 14 </answer>", 30, True),  # kept, but longer: the cap drops it
    # prompt 1: 5 - 1 = 4
    ("<think> 5 - 1 = 4 </think> <answer> 4 </answer>", 12, True),
    ("<think> 5 - 1 =  4 </think>\n<answer> 4 </answer>", 13, True),  # duplicate
    ("5 - 1 = 4 <answer> 4 </answer>", 10, True),  # no think block
    ("<think> 5 - 1 = 4, 5 - 1 = 4, 5 - 1 = 4, 5 - 1 = 4 </think> "
     "<answer> 4 </answer>", 28, True),  # repetitive
    # prompt 2: 7 * 2 = 14
    ("<think> 7 * 2 = 14 </think> <answer> 14 </answer>", 16, False),  # truncated
    ("7 * 2 = 14", 8, True),  # no answer tag: not strictly correct
    ("<think> 7 * 2 = 9 </think> <answer> 9 </answer>", 14, True),  # wrong
    ("", 1, True),  # empty
    # prompt 3: 9 - 3 = 6
    ("<think> One step. So 9 - 3 = 6. Cheheck: 6 + 3 = 9. </think> <answer> 6 </answer>",
     24, True),  # a misspelt word
    ("<think> One step. So 9 - 3 = 6. Check: 6 + 3 = 8. </think> <answer> 6 </answer>",
     24, True),  # a step that does not hold
    ("<think> One step. So 9 - 3 = 6. Check: 6 3 = 9. </think> <answer> 6 </answer>",
     23, True),  # an "=" with no operation before it
    ("<think> One step. So 9 - 3 = 6. Check: 6 + 3 = 9. </think> <answer> 6 </answer>",
     24, True),  # kept
]
EXPECTED_KEPT = {"correct": 12, "formatted": 11, "single_language": 10,
                 "known_words": 9, "steps_check_out": 7, "non_repetitive": 6,
                 "not_truncated": 5, "deduplicate": 4, "capped": 3}


@pytest.fixture()
def candidates() -> pd.DataFrame:
    texts, lengths, finished = zip(*CANDIDATES)
    return score_candidates(ROWS, K, texts, lengths=lengths, finished=finished)


def test_score_candidates_layout(candidates):
    assert len(candidates) == len(ROWS) * K
    assert candidates["prompt_index"].tolist() == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    assert candidates["sample_index"].tolist() == [0, 1, 2, 3] * 4
    assert candidates["question"].tolist()[4] == "5 - 1"
    for column in ("answer", "completion", "correct", "formatted", "lang_mixed",
                   "repetitive", "length", "truncated"):
        assert column in candidates


def test_each_filter_removes_what_it_names(candidates):
    kept, yields = apply_filters(candidates, max_per_prompt=1)
    assert list(yields.columns) == YIELD_COLUMNS
    assert list(yields.index) == ["sampled", *DEFAULT_FILTERS, "capped"]
    assert yields.loc["sampled"].tolist() == [16, 0, 1.0, 1.0, 4]
    previous = 16
    for stage, n in EXPECTED_KEPT.items():
        row = yields.loc[stage]
        assert row["kept"] == n and row["dropped"] == previous - n, stage
        assert row["kept / sampled"] == pytest.approx(n / 16)
        assert row["kept / previous"] == pytest.approx(n / previous)
        previous = n
    assert yields.loc["not_truncated", "prompts"] == 3  # prompt 2 has nothing left
    # the shortest of prompt 0's two survivors, prompt 1's first copy, prompt 3's last
    assert kept.index.tolist() == [0, 4, 15]
    assert kept["sample_index"].tolist() == [0, 0, 3]


def test_without_cap_the_survivors_keep_their_order(candidates):
    kept, yields = apply_filters(candidates)
    assert kept.index.tolist() == [0, 3, 4, 15]
    assert "capped" not in yields.index


def test_a_subset_of_filters(candidates):
    kept, yields = apply_filters(candidates, filters=("correct", "deduplicate"))
    assert list(yields.index) == ["sampled", "correct", "deduplicate"]
    assert yields["kept"].tolist() == [16, 12, 11]


def test_deduplicate_is_per_prompt():
    same = "<think> 7 * 2 = 14 </think> <answer> 14 </answer>"
    c = score_candidates([ROWS[0], ROWS[2]], 2, [same, same, same, same.upper()])
    kept, yields = apply_filters(c, filters=("deduplicate",))
    assert kept["prompt_index"].tolist() == [0, 1]  # one copy for each prompt
    assert normalise_completion(" a \n b ") == normalise_completion("A b")


def test_cap_keeps_the_shortest_and_breaks_ties_by_sample(candidates):
    capped = cap_per_prompt(candidates, 2)
    # prompt 0: lengths 20, 20, 22, 30 -> samples 0, 1 (tie at 20: the earlier first)
    assert capped.index.tolist() == [0, 1, 4, 6, 9, 11, 12, 14]
    no_lengths = score_candidates(ROWS[:1], 2, ["a long one", "short"])
    assert cap_per_prompt(no_lengths, 1)["completion"].tolist() == ["short"]
    with pytest.raises(ValueError, match="max_per_prompt"):
        apply_filters(candidates, max_per_prompt=0)


def test_unknown_lengths_and_finish_count_as_not_truncated():
    c = score_candidates(ROWS[:1], 1, [CANDIDATES[0][0]])
    kept, _ = apply_filters(c)
    assert len(kept) == 1


def test_filters_never_raise_on_malformed_completions():
    junk = ["", "<answer>", "</answer><answer>", "<think>" * 500, "1" * 3000, "\x00"]
    c = score_candidates(ROWS[:1], len(junk), junk)
    kept, yields = apply_filters(c)
    assert len(kept) == 0 and yields.loc["correct", "kept"] == 0
    assert pd.isna(yields.loc["formatted", "kept / previous"])  # 0 / 0


def test_random_control_size_determinism_and_no_filter(candidates):
    a = random_control(candidates, 5, seed=3)
    b = random_control(candidates, 5, seed=3)
    assert len(a) == 5 and a.index.tolist() == b.index.tolist()
    assert a.index.is_monotonic_increasing and a.index.is_unique
    draws = {tuple(random_control(candidates, 5, seed=s).index) for s in range(20)}
    assert len(draws) > 1
    assert len(random_control(candidates, 16, seed=0)) == 16  # all of them
    assert len(random_control(candidates, 0, seed=0)) == 0
    with pytest.raises(ValueError, match="between 0 and the number of candidates"):
        random_control(candidates, 17)


def test_to_sft_rows_is_trl_conversational(candidates, tmp_path):
    kept, _ = apply_filters(candidates)
    rows = to_sft_rows(kept)
    assert len(rows) == 4
    assert rows[0] == {
        "messages": [
            {"role": "user", "content": "What is 2 + 3 * 4?"},
            {"role": "assistant", "content": CANDIDATES[0][0]},
        ],
        "question": "2 + 3 * 4", "answer": "14", "source": "rejection_sampling",
    }
    path = write_jsonl(rows, tmp_path / "rs.jsonl")
    assert read_jsonl(path) == json.loads(json.dumps(rows))
    with pytest.raises(ValueError, match="lacks the column"):
        to_sft_rows(kept.drop(columns="completion"))


def test_bad_arguments(candidates):
    with pytest.raises(ValueError, match="k \\(samples per prompt\\)"):
        score_candidates(ROWS, 0, [])
    with pytest.raises(ValueError, match="rows is empty"):
        score_candidates([], 1, [])
    with pytest.raises(ValueError, match="lack the column"):
        score_candidates([{"q": "1 + 1"}], 1, ["x"])
    with pytest.raises(ValueError, match="got 2 completions for 4 prompts x k=1"):
        score_candidates(ROWS, 1, ["a", "b"])
    with pytest.raises(ValueError, match="unknown filter.*'kind'"):
        apply_filters(candidates, filters=("correct", "kind"))
    with pytest.raises(ValueError, match="wrap it"):
        apply_filters(candidates, filters="correct")
    with pytest.raises(ValueError, match="candidates is empty"):
        apply_filters(candidates.iloc[:0])
    with pytest.raises(ValueError, match="lack the column"):
        apply_filters(candidates.drop(columns="lang_mixed"))


# ------------------------------------------------------------------ end to end, tiny


@pytest.fixture(scope="module")
def tiny():
    tok = build_tokenizer()
    return random_model(tok, size="micro", seed=0), tok


def test_sample_candidates_on_a_tiny_model(tiny):
    model, tok = tiny
    kw = dict(temperature=1.0, max_new_tokens=5, batch_size=4, seed=1)
    c = sample_candidates(model, tok, ROWS[:2], 3, **kw)
    assert len(c) == 2 * 3
    assert c.columns[:3].tolist() == ["prompt_index", "sample_index", "question"]
    assert c["prompt_index"].tolist() == [0, 0, 0, 1, 1, 1]
    assert c["answer"].tolist() == ["14"] * 3 + ["4"] * 3
    assert c["length"].between(1, 5).all()
    again = sample_candidates(model, tok, pd.DataFrame(ROWS[:2]), 3, **kw)
    assert again["completion"].tolist() == c["completion"].tolist()
    kept, yields = apply_filters(c)  # gibberish: structure only
    assert yields.loc["sampled", "kept"] == 6
    with pytest.raises(ValueError, match="k \\(samples per prompt\\)"):
        sample_candidates(model, tok, ROWS, 0)
    with pytest.raises(ValueError, match="rows is empty"):
        sample_candidates(model, tok, [], 2)


def test_cli_parser_defaults():
    parser = argparse.ArgumentParser()
    add_rejection_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["rejection-sample", "--model", "m"])
    assert args.k == 16 and args.split == "train" and args.max_per_prompt is None
    assert callable(args.func)
    args = parser.parse_args(
        ["rejection-sample", "--model", "m", "--task", "countdown"])
    assert args.task == "countdown"
    with pytest.raises(SystemExit):  # a task without filters or a user turn
        parser.parse_args(["rejection-sample", "--model", "m", "--task", "gsm8k"])


# ------------------------------------------------------------------ Countdown

COUNTDOWN_ROWS = [
    {"question": "[3, 15, 14] -> 4", "answer": "3 + (15 - 14)",
     "numbers": [3, 15, 14], "target": 4},
    {"question": "[2, 5, 7] -> 17", "answer": "(2 * 5) + 7",
     "numbers": [2, 5, 7], "target": 17},
]
RIGHT = ("<think> Numbers 3, 15, 14; target 4. 15 - 14 = 1, 1 + 3 = 4. </think> "
         "<answer> (15 - 14) + 3 </answer>")
COUNTDOWN_CANDIDATES = [
    # (completion, finished); what drops it, if anything
    (RIGHT, True),  # kept
    ("<think> 15 - 14 = 2, 2 + 3 = 4. </think> <answer> (15 - 14) + 3 </answer>",
     True),  # a right answer after a wrong step: not worked out
    ("<think> 3 + 14 = 17, not 4. </think> <answer> (3 + 14) - 15 </answer>",
     True),  # wrong: 2
    (RIGHT, False),  # cut off
    ("<think> 2 * 5 = 10, 10 + 7 = 17. </think> <answer> (2 * 5) + 7 </answer>",
     True),  # kept
    ("<think> 2 * 5 = 10,  10 + 7 = 17. </think> <answer> (2 * 5) + 7 </answer>",
     True),  # duplicate
    ("<think> 5 + 7 = 12, 12 + 5 = 17. </think> <answer> (5 + 7) + 5 </answer>",
     True),  # reaches 17 with the wrong numbers
    ("", True),  # empty
]


def test_countdown_candidates_keep_right_worked_ended_answers():
    texts = [t for t, _ in COUNTDOWN_CANDIDATES]
    c = score_candidates(COUNTDOWN_ROWS, 4, texts, lengths=[30] * 8,
                         finished=[f for _, f in COUNTDOWN_CANDIDATES])
    assert c["worked_out"].tolist() == [True, False, False, True,
                                        True, True, False, False]
    assert c["correct"].tolist() == [True, True, False, True,
                                     True, True, False, False]
    assert default_filters(c) == COUNTDOWN_FILTERS
    kept, yields = apply_filters(c, default_filters(c))
    assert list(yields.index) == ["sampled", *COUNTDOWN_FILTERS]
    assert yields["kept"].tolist() == [8, 5, 4, 3, 2]
    assert kept.index.tolist() == [0, 4]
    assert yields.loc["deduplicate", "prompts"] == 2
    rows = to_sft_rows(kept)
    assert rows[0]["messages"][0]["content"] == countdown_prompt([3, 15, 14], 4)[0][
        "content"]
    assert rows[1]["messages"][1]["content"] == texts[4]
    assert rows[0]["question"] == "[3, 15, 14] -> 4"


def test_countdown_duplicates_and_the_arithmetic_filters():
    texts = [t for t, _ in COUNTDOWN_CANDIDATES]
    c = score_candidates(COUNTDOWN_ROWS, 4, texts)
    kept, yields = apply_filters(c, filters=("correct", "deduplicate"))
    assert kept.index.tolist() == [0, 1, 4]  # the cut-off copy of 0 is a duplicate
    arithmetic = score_candidates(ROWS, K, [t for t, *_ in CANDIDATES])
    assert "worked_out" not in arithmetic
    assert default_filters(arithmetic) == DEFAULT_FILTERS
    with pytest.raises(ValueError, match="no 'worked_out' column"):
        apply_filters(arithmetic, filters=("worked_out",))
    with pytest.raises(ValueError, match="rows is empty"):
        with_task_columns(c, [])
    with pytest.raises(ValueError, match="7 candidates for 2 rows"):
        with_task_columns(c.iloc[:7], COUNTDOWN_ROWS)


def test_cli_writes_kept_control_candidates_and_yields(tiny, tmp_path, capsys,
                                                      monkeypatch):
    from grpo_lib import rejection
    from grpo_lib.cli import main
    from grpo_lib.tasks.cold_start import annotate

    real_generate = rejection.generate

    def generate_with_worked_answers(model, tokenizer, prompts, **kwargs):
        """The micro model's rollout, whose first completion of the first two prompts
        is replaced by the worked, right answer: some candidates pass every filter."""
        rollout = real_generate(model, tokenizer, prompts, **kwargs)
        k = kwargs["num_generations"]
        for i, row in enumerate(load_task_split("arithmetic", "train").select(range(2))):
            rollout.texts[i * k] = annotate(row["question"])
            rollout.finished[i * k] = True  # it ended, as a worked answer does
        return rollout

    monkeypatch.setattr(rejection, "generate", generate_with_worked_answers)
    model, tok = tiny
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    files = {name: tmp_path / name for name in
             ("kept.jsonl", "control.jsonl", "candidates.csv.gz", "yields.csv")}
    main(["rejection-sample", "--model", str(tmp_path / "m"), "--n", "3", "--k", "2",
          "--max-new-tokens", "4", "--batch-size", "4",
          "--out", str(files["kept.jsonl"]),
          "--control-out", str(files["control.jsonl"]),
          "--candidates-csv", str(files["candidates.csv.gz"]),
          "--yields-csv", str(files["yields.csv"])])
    out = capsys.readouterr().out
    assert "3 prompts x k=2" in out and "sampling and scoring took" in out
    candidates = pd.read_csv(files["candidates.csv.gz"])
    yields = pd.read_csv(files["yields.csv"], index_col="stage")
    assert len(candidates) == 6 and yields.loc["sampled", "kept"] == 6
    kept = yields.loc["deduplicate", "kept"]
    assert yields.loc["correct", "kept"] >= kept == 2  # the two worked answers
    assert len(read_jsonl(files["control.jsonl"])) == kept  # same size as the kept set
    assert len(read_jsonl(files["kept.jsonl"])) == kept


@pytest.mark.parametrize("text, known, holds", [
    ("<think> * comes before + and -. First 3 * 4 = 12, now 2 + 12. Then 2 + 12 = 14. "
     "Check: 14 - 12 = 2. </think> <answer> 14 </answer>", True, True),
    ("<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>", True, True),
    ("<think> One step. So 2 - 3 = -1. Check: -1 + 3 = 2. </think> <answer> -1 </answer>",
     True, True),
    ("<think> ( ) come first. First 8 / 2 = 4, now (4 + 1). </think>", True, True),
    ("<think> Then 36 - 24 = 22 </think> <answer> 22 </answer>", True, False),
    ("<think> One step. como 6 * 1 = 6. Check: 6 1 6 = 6. </think>", False, False),
    ("<think> 1 + 1 = 2 = 2 </think>", True, False),  # a second "=" with no operation
    ("<think> 6 / 0 = 0 </think>", True, False),  # division by zero: does not hold
    ("<think> 3 * 4 = 12, 然后 2 + 12 = 14 </think>", False, True),  # a Chinese word
    ("<think> no equation at all </think>", False, False),
    ("<think> 3 * 4 = 12", True, False),  # no closed think block
    ("", True, False),
    (None, False, False),
])
def test_readability_rules(text, known, holds):
    assert uses_known_words(text) is known
    assert steps_check_out(text) is holds


def test_steps_check_out_is_linear_on_hostile_traces():
    """A long run of numbers before one '=' (a model that babbles digits) used to cost
    quadratic time: 11 s at 16,000 numbers. Now each equation's left side is at most
    200 characters, and a trace of true equations of any length still passes."""
    babble = "<think>" + "1 " * 64_000 + "= 2 </think> <answer> 2 </answer>"
    steps = "".join(f"{i} + 1 = {i + 1}. " for i in range(4_000))
    start = time.perf_counter()
    assert not steps_check_out(babble)
    assert steps_check_out(f"<think> {steps}</think> <answer> 1 </answer>")
    assert time.perf_counter() - start < 10  # about 0.6 s here; quadratic: minutes


def test_readable_words_are_the_annotators():
    from grpo_lib.tasks.cold_start import annotate
    from grpo_lib.tasks.arithmetic import make_problems

    words = readable_words()
    assert {"First", "Then", "Check", "now", "think", "answer"} <= words
    for problem in make_problems(300, seed=11):  # every annotated trace is readable
        trace = annotate(problem.question)
        assert uses_known_words(trace) and steps_check_out(trace), trace
