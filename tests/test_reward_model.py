"""grpo_lib.reward_model: Bradley–Terry loss, the judge's pairs, the model, the reward."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.reward_model import (RewardModel, bradley_terry_loss, encode_pairs_side,
                                   load_reward_model, pairwise_accuracy,
                                   preference_pairs, preference_probability,
                                   reward_model_reward, score_texts,
                                   shuffled_batches, train_reward_model)
from grpo_lib.trainer import build_reward_funcs


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture()
def reward_model(tokenizer):
    policy = random_model(tokenizer, size="micro", seed=0)
    torch.manual_seed(0)
    return RewardModel.from_causal_lm(policy)


def _candidates():
    # two prompts x 3 answers; utilities 1.1, 0.1, 1.1 | 1.0, 0.0, 0.1
    return pd.DataFrame({
        "prompt_index": [0, 0, 0, 1, 1, 1],
        "question": ["2 + 3"] * 3 + ["4 * 5"] * 3,
        "completion": ["<think> a </think> <answer> 5 </answer>", "<think> b </think> "
                       "<answer> 6 </answer>", "<think> c </think> <answer> 5 </answer>",
                       "20", "21", "<think> d </think> <answer> 21 </answer>"],
        "correct": [True, False, True, True, False, False],
        "formatted": [True, True, True, False, False, True],
    })


def test_shuffled_batches_cover_each_row_once_per_epoch():
    batches = list(shuffled_batches(10, 3, steps=6, seed=1))
    assert [len(b) for b in batches] == [3] * 6
    first_epoch, second_epoch = batches[:3], batches[3:]
    for epoch in (first_epoch, second_epoch):  # 9 of the 10 rows, none twice
        rows = [i for b in epoch for i in b]
        assert len(set(rows)) == 9 and set(rows) <= set(range(10))
    assert batches == list(shuffled_batches(10, 3, steps=6, seed=1))  # seeded
    # a batch larger than the rows: every row, each time
    assert all(sorted(b) == [0, 1] for b in shuffled_batches(2, 5, steps=2))


def test_bradley_terry_loss_is_the_mean_negative_log_sigmoid():
    chosen, rejected = torch.tensor([2.0, 0.0, -1.0]), torch.tensor([0.0, 0.0, 1.0])
    expected = -sum(math.log(1 / (1 + math.exp(-(c - r))))
                    for c, r in zip(chosen.tolist(), rejected.tolist())) / 3
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(expected)
    # only differences count: a shared shift leaves the loss and the probability alone
    assert bradley_terry_loss(chosen + 7, rejected + 7).item() == pytest.approx(expected)
    assert preference_probability(torch.tensor([1.0]), torch.tensor([1.0])).item() == 0.5


@pytest.mark.parametrize("a, b", [((3,), (2,)), ((0,), (0,)), ((2, 1), (2, 1))])
def test_bradley_terry_loss_refuses_bad_shapes(a, b):
    with pytest.raises(ValueError, match=r"two \[N\] score tensors"):
        bradley_terry_loss(torch.zeros(a), torch.zeros(b))


def test_pairs_without_flips_follow_the_utility_and_skip_ties():
    pairs = preference_pairs(_candidates(), flip=0.0)
    # prompt 0: (a, b) and (c, b); a-c tie. prompt 1: all three differ -> 3 pairs
    assert len(pairs) == 5
    assert pairs["agrees"].all()
    assert (pairs["chosen_utility"] > pairs["rejected_utility"]).all()
    assert set(pairs.loc[pairs.prompt_index == 0, "rejected"]) == {
        "<think> b </think> <answer> 6 </answer>"}


def test_flipped_pairs_swap_the_label_at_about_the_rate():
    many = pd.concat([_candidates().assign(prompt_index=lambda d, i=i: d.prompt_index
                                           + 2 * i) for i in range(400)])
    pairs = preference_pairs(many, flip=0.2, seed=3)
    assert len(pairs) == 2000
    assert 0.17 < 1 - pairs["agrees"].mean() < 0.23
    flipped = pairs[~pairs["agrees"]]
    assert (flipped["chosen_utility"] < flipped["rejected_utility"]).all()
    assert preference_pairs(many, flip=0.2, seed=3).equals(pairs)  # seeded


@pytest.mark.parametrize("flip", [-0.1, 0.5, 1.0])
def test_pairs_refuse_a_judge_worse_than_a_coin(flip):
    with pytest.raises(ValueError, match="error rate"):
        preference_pairs(_candidates(), flip=flip)


def test_pairs_name_missing_columns():
    with pytest.raises(ValueError, match="completion"):
        preference_pairs(_candidates().drop(columns="completion"))


def test_encoding_is_right_padded_and_the_score_ignores_padding(tokenizer, reward_model):
    ids, mask = encode_pairs_side(tokenizer, ["2 + 3", "2 + 3"],
                                  ["5", "<think> 2 + 3 = 5 </think> <answer> 5 </answer>"])
    assert mask[0].tolist() == sorted(mask[0].tolist(), reverse=True)  # 1s then 0s
    assert mask[0].sum() < mask[1].sum()
    together = score_texts(reward_model, tokenizer, ["2 + 3"] * 2, ["5", "<think> 2 + "
                           "3 = 5 </think> <answer> 5 </answer>"])
    alone = score_texts(reward_model, tokenizer, ["2 + 3"], ["5"])
    assert together.shape == (2,)
    assert together[0].item() == pytest.approx(alone[0].item(), abs=1e-5)


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device"))])
def test_the_new_head_follows_the_bodys_device_and_dtype(tokenizer, device):
    """A policy in bfloat16 (on a GPU, the book's default there) gets a head in
    bfloat16 on its device; it was float32 on the CPU, and the first score failed."""
    policy = random_model(tokenizer, size="micro", seed=0).to(device, torch.bfloat16)
    model = RewardModel.from_causal_lm(policy)
    assert model.head.weight.dtype == torch.bfloat16
    assert model.head.weight.device.type == device
    ids, mask = encode_pairs_side(tokenizer, ["2 + 3"], ["<answer> 5 </answer>"], 32)
    assert model(ids.to(device), mask.to(device)).shape == (1,)


def test_encoding_cuts_long_texts_and_checks_lengths(tokenizer):
    ids, mask = encode_pairs_side(tokenizer, ["2 + 3"], ["1 " * 500], max_length=40)
    assert ids.shape == (1, 40) and mask.all()
    with pytest.raises(ValueError, match="one prompt per completion"):
        encode_pairs_side(tokenizer, ["2 + 3"], ["5", "6"])


def test_training_learns_a_separable_preference(tokenizer, reward_model):
    rows = []
    for i in range(40):
        q = f"{i % 9} + {i % 7}"
        rows.append({"prompt_index": i, "question": q,
                     "chosen": "<think> ok </think> <answer> 1 </answer>",
                     "rejected": "no", "chosen_utility": 1.1, "rejected_utility": 0.0,
                     "agrees": True})
    pairs = pd.DataFrame(rows)
    log = train_reward_model(reward_model, tokenizer, pairs, steps=30, batch_size=8,
                             lr=3e-3, eval_pairs=pairs, eval_every=30, log=None)
    assert list(log.columns[:3]) == ["step", "loss", "accuracy"]
    assert log["loss"].iloc[-5:].mean() < log["loss"].iloc[:5].mean()
    assert log["eval_label"].iloc[-1] == 1.0
    assert pairwise_accuracy(reward_model, tokenizer, pairs)["utility"] == 1.0


def test_training_refuses_no_pairs(tokenizer, reward_model):
    with pytest.raises(ValueError, match="pairs is empty"):
        train_reward_model(reward_model, tokenizer, preference_pairs(
            _candidates().iloc[:1]), steps=1)


def test_save_load_and_the_config_reward(tmp_path, tokenizer, reward_model):
    texts = ["<think> 2 + 3 = 5 </think> <answer> 5 </answer>", "7", ""]
    before = score_texts(reward_model, tokenizer, ["2 + 3"] * 3, texts)
    reward_model.save(tmp_path / "rm", tokenizer, {"note": "test"})
    loaded, loaded_tok = load_reward_model(tmp_path / "rm")
    after = score_texts(loaded, loaded_tok, ["2 + 3"] * 3, texts)
    assert torch.allclose(before, after, atol=1e-6)
    [fn] = build_reward_funcs([{"name": "reward_model_reward",
                                "path": str(tmp_path / "rm")}])
    values = fn(texts + [None], question=["2 + 3"] * 4)
    assert values[:3] == pytest.approx(after.tolist(), abs=1e-6)
    assert math.isfinite(values[3])  # a missing completion scores as empty text


def test_reward_names_what_it_needs(tmp_path):
    with pytest.raises(TypeError, match="path="):
        reward_model_reward(["5"], question=["2 + 3"])
    with pytest.raises(FileNotFoundError, match="train-reward-model"):
        reward_model_reward(["5"], question=["2 + 3"], path=str(tmp_path))
    with pytest.raises(TypeError, match="'prompt' or 'question'"):
        reward_model_reward(["5", "6"], question=["2 + 3"], path=str(tmp_path))


def test_the_command_trains_saves_and_reports_mistakes(tmp_path, capsys):
    from grpo_lib.cli import main

    out = tmp_path / "rm"
    main(["train-reward-model", "--n-train", "8", "--n-test", "8", "--k", "3",
          "--steps", "2", "--batch-size", "4", "--out",
          str(out)])
    info = json.loads((out / "reward_model.json").read_text())
    assert info["command"].startswith("python -m grpo_lib train-reward-model")
    assert set(info["held_out"]) == {"label", "utility", "margin"}
    assert len(pd.read_csv(out / "train_log.csv")) == 2
    assert len(pd.read_json(out / "pairs_train.jsonl.gz", lines=True)) == \
        info["pairs_train"]
    model, tok = load_reward_model(out)
    assert score_texts(model, tok, ["2 + 3"], ["5"]).shape == (1,)
    capsys.readouterr()
    for bad in (["--model", str(tmp_path / "nowhere")], ["--flip", "0.5"]):
        with pytest.raises(SystemExit) as stop:
            main(["train-reward-model", "--out", str(tmp_path / "x"), *bad])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        assert "train-reward-model: error:" in err and "\n" not in err


def test_best_of_n_picks_each_groups_top_answer():
    from grpo_lib.reward_model import best_of_n

    scores = torch.tensor([0.1, 2.0, -1.0, 5.0, 4.0, 3.0])
    assert best_of_n(scores, 3).tolist() == [1, 3]
    assert best_of_n(scores, 1).tolist() == list(range(6))
    assert best_of_n(scores, 6).tolist() == [3]
    for bad in ((scores, 4), (scores, 0), (torch.zeros(0), 2)):
        with pytest.raises(ValueError, match="best_of_n"):
            best_of_n(*bad)


def test_hostile_completions_score_fast_and_finite(tokenizer, reward_model):
    import time

    texts = ["7" * 1_000_000, "<answer>" * 125_000, "九" * 300_000, None, ""]
    start = time.perf_counter()
    scores = score_texts(reward_model, tokenizer, ["2 + 3"] * len(texts), texts)
    assert time.perf_counter() - start < 5.0
    assert torch.isfinite(scores).all() and scores.shape == (len(texts),)
