"""Tests for grpo_lib.evaluation: the metrics on hand-written completions with known
values, and evaluate() end to end with a scripted model (known answers) and a random one
(structure)."""
from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast

from grpo_lib.evaluation import (
    METRIC_COLUMNS,
    REPETITION_THRESHOLD,
    build_prompts,
    evaluate,
    score_completions,
    summarize_scores,
)
from grpo_lib.models import build_tokenizer, random_model, stop_token_ids

GOOD = "<think> 3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>"
LTR = "<think> 2 + 3 = 5, 5 * 4 = 20 </think> <answer> 20 </answer>"
NO_TAGS = "3 * 4 = 12, 2 + 12 = 14. The answer is 14."
CHINESE = "<think> 3 * 4 = 12, 然后 2 + 12 = 14 </think> <answer> 14 </answer>"
SELF_FIX = ("<think> 2 + 3 = 5, 5 * 4 = 20. Wait, * comes before +. Let me recheck. "
            "3 * 4 = 12, 2 + 12 = 14 </think> <answer> 14 </answer>")
RAMBLING = "<think> 2 + 3 = 5, now 5 * 4. 2 + 3 = 5, now 5 * 4. 2 + 3 = 5, now 5 * 4. 2"
COMPLETIONS = [GOOD, LTR, NO_TAGS, CHINESE, SELF_FIX, RAMBLING]
LENGTHS = [20, 20, 18, 22, 40, 64]
FINISHED = [True, True, True, True, True, False]


def test_score_completions_known_values():
    s = score_completions(COMPLETIONS, ["14"] * 6, LENGTHS, FINISHED)
    preds = [None if pd.isna(v) else v for v in s["strict_pred"]]
    assert preds == ["14", "20", None, "14", "14", None]
    assert s["lenient_pred"].tolist() == ["14", "20", "14", "14", "14", "2"]
    assert s["correct"].tolist() == [True, False, False, True, True, False]
    assert s["lenient_correct"].tolist() == [True, False, True, True, True, False]
    assert s["formatted"].tolist() == [True, True, False, True, True, False]
    assert s["lang_mixed"].tolist() == [False, False, False, True, False, False]
    assert s["self_correction"].tolist() == [False, False, False, False, True, False]
    assert s["repetitive"].tolist() == [False, False, False, False, False, True]
    assert s.loc[5, "repeated_fraction"] > REPETITION_THRESHOLD
    assert s["truncated"].tolist() == [False] * 5 + [True]


def test_summarize_scores_known_values():
    s = score_completions(COMPLETIONS, ["14"] * 6, LENGTHS, FINISHED)
    row = summarize_scores(s)
    expected = {
        "strict_acc": 3 / 6, "lenient_acc": 4 / 6, "format_rate": 4 / 6,
        "lang_mix_rate": 1 / 6, "self_correction_rate": 1 / 6, "repetition_rate": 1 / 6,
        "mean_length": 184 / 6, "truncated_rate": 1 / 6, "k": 1, "pass_at_k": 3 / 6,
        "n": 6,
    }
    assert list(row) == METRIC_COLUMNS
    for key, value in expected.items():
        assert math.isclose(row[key], value), (key, row[key], value)


def test_pass_at_k_groups_consecutive_rows():
    # groups of k=2: (LTR, NO_TAGS) unsolved, (GOOD, RAMBLING) and (CHINESE, SELF_FIX)
    # solved -> pass@2 = 2/3 while the per-sample accuracy is 3/6
    order = [LTR, NO_TAGS, GOOD, RAMBLING, CHINESE, SELF_FIX]
    row = summarize_scores(score_completions(order, ["14"] * 6), k=2)
    assert math.isclose(row["pass_at_k"], 2 / 3) and math.isclose(row["strict_acc"], 0.5)
    assert row["n"] == 3 and row["k"] == 2
    assert math.isnan(row["mean_length"])  # no lengths given


def test_score_completions_never_raises_and_checks_lengths():
    s = score_completions(["", "<answer>", "</answer><answer>", "1" * 5000], [1, 2, 3, 4])
    assert not s["correct"].any()
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        score_completions(["a", "b"], ["1"])
    with pytest.raises(ValueError, match="k=4"):
        summarize_scores(score_completions(COMPLETIONS, ["14"] * 6), k=4)


# ---------------------------------------------------------------- evaluate, end to end


class ScriptedModel(nn.Module):
    """A stand-in causal LM that writes the same token script for every prompt: step
    ``t`` after the prompt puts all probability on ``script[t]`` (then the stop token)."""

    def __init__(self, script: list[int], vocab_size: int, stop_id: int):
        super().__init__()
        self.script = script + [stop_id]
        self.vocab_size = vocab_size
        self.config = None
        self.dummy = nn.Parameter(torch.zeros(1))
        self.step = 0

    def forward(self, input_ids, attention_mask=None, position_ids=None,
                past_key_values=None, use_cache=True, **kwargs):
        if past_key_values is None or past_key_values.get_seq_length() == 0:
            self.step = 0  # prefill
        if past_key_values is not None:  # keep the cache length honest
            b, t = input_ids.shape
            kv = torch.zeros(b, 1, t, 1)
            past_key_values.update(kv, kv, 0)
        logits = torch.full((*input_ids.shape, self.vocab_size), -1e9)
        token = self.script[min(self.step, len(self.script) - 1)]
        logits[:, -1, token] = 0.0
        self.step += 1
        return CausalLMOutputWithPast(logits=logits, past_key_values=past_key_values)


PROBLEMS = [
    {"question": "2 + 3 * 4", "answer": "14"},
    {"question": "5 - 1", "answer": "4"},
    {"question": "7 * 2", "answer": "14"},
]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def scripted(tok):
    ids = tok(GOOD, add_special_tokens=False)["input_ids"]
    return ScriptedModel(ids, len(tok), stop_token_ids(tok)[0]), len(ids)


def test_evaluate_scripted_model_known_accuracy(tok):
    model, n_tokens = scripted(tok)
    table, samples = evaluate(model, tok, PROBLEMS, n=3, batch_size=2,
                              max_new_tokens=n_tokens + 5, num_samples=2,
                              temperature=0.7, return_samples=True)
    assert list(table.index) == ["greedy", "sampled"]
    assert list(table.columns) == METRIC_COLUMNS
    for mode in ("greedy", "sampled"):
        row = table.loc[mode]
        assert math.isclose(row["strict_acc"], 2 / 3) and math.isclose(row["pass_at_k"], 2 / 3)
        assert row["format_rate"] == 1.0 and row["truncated_rate"] == 0.0
        assert row["mean_length"] == n_tokens + 1  # the script plus its stop token
        assert row["lang_mix_rate"] == 0.0 and row["n"] == 3
    assert table.loc["sampled", "k"] == 2
    assert len(samples) == 3 + 3 * 2
    assert (samples["completion"] == GOOD).all()
    assert samples["question"].tolist()[:3] == [p["question"] for p in PROBLEMS]
    assert samples["correct"].tolist()[:3] == [True, False, True]
    assert samples[samples["mode"] == "sampled"]["prompt_index"].tolist() == [0, 0, 1, 1, 2, 2]


def test_evaluate_truncation_is_counted(tok):
    model, n_tokens = scripted(tok)
    table = evaluate(model, tok, PROBLEMS, n=2, max_new_tokens=n_tokens // 2)
    row = table.loc["greedy"]
    assert row["truncated_rate"] == 1.0 and row["strict_acc"] == 0.0
    assert row["mean_length"] == n_tokens // 2 and row["n"] == 2


def test_evaluate_random_model_structure_and_determinism(tok):
    from datasets import Dataset

    model = random_model(tok, size="micro", seed=0)
    ds = Dataset.from_list([{**p, "prompt": [{"role": "user", "content": "What is "
                                              f"{p['question']}?"}]} for p in PROBLEMS])
    kw = dict(n=2, batch_size=4, max_new_tokens=6, num_samples=3, seed=1,
              return_samples=True)
    t1, s1 = evaluate(model, tok, ds, **kw)
    t2, s2 = evaluate(model, tok, ds, **kw)
    pd.testing.assert_frame_equal(t1, t2)
    assert s1["completion"].tolist() == s2["completion"].tolist()
    assert t1.loc["greedy", "n"] == 2 and t1.loc["sampled", "k"] == 3
    assert 1 <= t1.loc["greedy", "mean_length"] <= 6
    # the table is the mean of the per-sample frame
    sampled = s1[s1["mode"] == "sampled"]
    assert math.isclose(t1.loc["sampled", "truncated_rate"], sampled["truncated"].mean())
    assert math.isclose(t1.loc["sampled", "mean_length"], sampled["length"].mean())
    table_r1 = evaluate(model, tok, ds, n=1, max_new_tokens=4, prompt_format="r1_zero")
    assert list(table_r1.index) == ["greedy"]


def test_build_prompts_formats():
    chat = build_prompts(PROBLEMS[:1], "chat")
    assert chat == [[{"role": "user", "content": "What is 2 + 3 * 4?"}]]
    r1 = build_prompts(PROBLEMS[:1], "r1_zero")[0]
    assert r1.startswith("A conversation between User and Assistant")
    assert r1.endswith("User: What is 2 + 3 * 4?. Assistant:")
    with pytest.raises(ValueError, match="prompt_format"):
        build_prompts(PROBLEMS, "plain")


def test_evaluate_bad_arguments(tok):
    model = random_model(tok, size="micro")
    with pytest.raises(ValueError, match="n \\(number of problems\\)"):
        evaluate(model, tok, PROBLEMS, n=0)
    with pytest.raises(ValueError, match="num_samples"):
        evaluate(model, tok, PROBLEMS, num_samples=-1)
    with pytest.raises(ValueError, match="lacks the column"):
        evaluate(model, tok, [{"q": "1 + 1"}])
    with pytest.raises(ValueError, match="empty"):
        evaluate(model, tok, [])


def test_answer_entropy_and_group_diversity_known_values():
    from grpo_lib.evaluation import answer_entropy, group_diversity

    assert answer_entropy(["14", "14", "20", None]) == 1.5
    assert answer_entropy(["14"] * 4) == 0.0
    assert math.isclose(answer_entropy(["1", "2", "3", "4"]), 2.0)
    d = group_diversity([GOOD, GOOD, LTR, NO_TAGS, GOOD, GOOD, GOOD, GOOD], 4,
                        rewards=[1.1, 1.1, 0.1, 0.0, 1.1, 1.1, 1.1, 1.1])
    assert d["distinct"].tolist() == [3, 1]
    assert d["answer_entropy"].tolist() == [1.5, 0.0]  # 14, 14, 20, None | 14 x 4
    assert math.isclose(d.loc[0, "reward_mean"], 0.575)
    assert math.isclose(d.loc[0, "reward_std"], math.sqrt(((0.525**2) * 2 + 0.475**2
                                                           + 0.575**2) / 3))
    assert d["zero_std"].tolist() == [False, True]
    with pytest.raises(ValueError, match="group_size=3"):
        group_diversity([GOOD] * 4, 3)
