"""Tests for the arithmetic task, the corpus, the tokenizer, models and pretraining."""
import json
import random
import re

import pytest
import torch

from grpo_lib.corpus import BEHAVIOURS, CorpusMix, render_response, sample_documents
from grpo_lib.exercises.ch05 import check_left_to_right, check_precedence_matters
from grpo_lib.models import (build_tokenizer, count_parameters, load_model_and_tokenizer,
                             random_model, stop_token_ids)
from grpo_lib.tasks import load_task_split
from grpo_lib.tasks.arithmetic import (CHINESE_WORDINGS, Difficulty,
                                       evaluate_expression, load_split, make_problems,
                                       read_rows, solve_steps, tokenize_expression)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.mark.parametrize("question,correct,ltr", [
    ("2 + 3 * 4", 14, 20), ("(2 + 3) * 4", 20, 20), ("9 - 2 * 3", 3, 21),
    ("8 * (1 + 2) - 5", 19, 19), ("7 - 3 - 2", 2, 2), ("2 * 3 + 4 * 5", 26, 50),
])
def test_evaluation_orders(question, correct, ltr):
    assert evaluate_expression(question) == correct
    assert evaluate_expression(question, precedence=False) == ltr


def test_solve_steps_reduce_one_operation_at_a_time():
    assert solve_steps("2 + 3 * 4") == [(3, "*", 4, 12, "2 + 12"), (2, "+", 12, 14, "14")]
    assert solve_steps("(2 + 3) * 4")[0] == (2, "+", 3, 5, "5 * 4")


def test_bad_expressions_raise_clear_errors():
    with pytest.raises(ValueError, match="unexpected character"):
        tokenize_expression("2 + x")
    with pytest.raises(ValueError, match="unbalanced"):
        solve_steps("(2 + 3")
    with pytest.raises(ValueError, match="min_operands"):
        Difficulty(min_operands=5, max_operands=3)


@pytest.mark.parametrize("question,wrong", [
    ("", "ends where a number"), ("2 +", "ends where a number"),
    ("2 3", "3 .token 2. where an operator"), ("2 ** 3", "'\\*' .token 3. where a number"),
    ("2 + 3)", "unbalanced '\\)'"), ("((2 + 3)", "1 unbalanced"),
    ("()", "'\\)' .token 2. where a number"), ("2 (3)", "'\\(' .token 2."),
])
def test_malformed_expressions_say_what_is_out_of_place(question, wrong):
    with pytest.raises(ValueError, match=wrong):
        evaluate_expression(question)


def test_parentheses_around_a_lone_number_are_read():
    assert evaluate_expression("((7))") == 7
    assert evaluate_expression("((1 + 1)) * 3") == 6  # "(2)" after the first step
    with pytest.raises(ValueError, match="unexpected character '²'"):
        evaluate_expression("2²")  # a superscript is no decimal digit
    assert evaluate_expression("(2) + ((3)) * 4") == 14
    assert solve_steps("(2) + ((3)) * 4") == [(3, "*", 4, 12, "2 + 12"),
                                              (2, "+", 12, 14, "14")]


def test_problems_respect_difficulty_and_are_distinct():
    d = Difficulty(max_value=50)
    problems = make_problems(300, seed=1, difficulty=d)
    assert len({p.question for p in problems}) == 300
    for p in problems:
        assert p.answer == evaluate_expression(p.question)
        assert p.precedence_matters == (p.answer != evaluate_expression(p.question, False))
        for prec in (True, False):
            assert all(0 <= s[3] <= 50 for s in solve_steps(p.question, prec))


def test_committed_splits_do_not_overlap():
    train, test = read_rows("train"), read_rows("test")
    assert len(train) == 20000 and len(test) == 1000
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    ds = load_task_split("arithmetic", "test")
    assert ds[0]["prompt"] == [{"role": "user", "content": f"What is {ds[0]['question']}?"}]
    with pytest.raises(ValueError, match="unknown task"):
        load_task_split("chess")
    with pytest.raises(FileNotFoundError, match="make-data"):
        read_rows("validation")


def test_the_same_problems_asked_in_chinese_and_in_two_languages():
    en, zh, both = (load_task_split(t, "test")
                    for t in ("arithmetic", "arithmetic_zh", "arithmetic_bilingual"))
    assert en["question"] == zh["question"] == both["question"]
    assert en["answer"] == zh["answer"] == both["answer"]
    texts = [[row["prompt"][0]["content"] for row in ds.select(range(12))]
             for ds in (en, zh, both)]
    assert texts[2][0::2] == texts[0][0::2]  # even rows: English
    assert all(re.search(r"[\u4e00-\u9fff]", t) for t in texts[1] + texts[2][1::2])
    assert all(q in t for q, t in zip(en["question"][:12], texts[1]))
    assert texts[1][:3] == [w.format(q=q) for w, q in
                            zip(CHINESE_WORDINGS, en["question"][:3])]
    assert len({t.replace(q, "{q}") for t, q in zip(texts[2][1::2],
                                                   en["question"][1:12:2])}) == 3
    with pytest.raises(ValueError, match="language must be one of"):
        load_split("test", language="fr")


def test_every_behaviour_renders_what_it_claims():
    p = next(p for p in make_problems(100, seed=3) if p.precedence_matters)
    rng = random.Random(0)
    texts = {b: render_response(p, b, rng) for b in BEHAVIOURS}
    assert texts["correct"].endswith(f"<answer> {p.answer} </answer>")
    ltr = evaluate_expression(p.question, False)
    assert texts["left_to_right"].endswith(f"<answer> {ltr} </answer>")
    assert "<think>" not in texts["no_think"] and "<answer>" in texts["no_think"]
    assert "<" not in texts["no_tags"] and texts["no_tags"].endswith(f"{p.answer}.")
    assert "</think>" not in texts["unclosed_think"]
    assert re.search(r"[\u4e00-\u9fff]", texts["chinese_words"])
    assert "Wait" in texts["self_correction"] and texts["self_correction"].endswith(
        f"<answer> {p.answer} </answer>")
    with pytest.raises(ValueError, match="unknown behaviour"):
        render_response(p, "sarcasm", rng)


def test_corpus_mix_validates_and_triggers_fire():
    with pytest.raises(ValueError, match="probability"):
        CorpusMix(ltr_rate=1.5)
    problems = make_problems(500, seed=4)
    docs = sample_documents(problems, 4000, seed=0)
    counts = {b: sum(d["behaviour"] == b for d in docs) for b in BEHAVIOURS + ("chat",)}
    assert all(counts[b] > 0 for b in counts), counts
    with pytest.raises(ValueError, match="at least one problem"):
        sample_documents([], 3)


def test_tokenizer_round_trips_and_splits_digits(tok):
    for text in ["What is 123 + 45?", "<think> 首先 3 * 4 = 12 </think> <answer> 14 </answer>",
                 "émoji 🙂 and tabs\t", ""]:
        assert tok.decode(tok(text)["input_ids"]) == text
    pieces = [tok.decode([i]) for i in tok("9876")["input_ids"]]
    assert pieces == ["9", "8", "7", "6"]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.padding_side == "left"
    rendered = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False,
                                       add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert stop_token_ids(tok) == [tok.convert_tokens_to_ids("<|im_end|>"),
                                   tok.convert_tokens_to_ids("<|endoftext|>")]
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(100)


def test_random_model_sizes(tok):
    m = random_model(tok, "micro")
    assert m.config.vocab_size == len(tok) and count_parameters(m) < 100_000
    with pytest.raises(ValueError, match="unknown model size"):
        random_model(tok, "huge")


def test_every_size_can_be_pretrained_from_the_cli(tok):
    """`pretrain --size` offers exactly the sizes MODEL_SIZES defines, each with its
    schedule, and they grow in the listed order."""
    import argparse

    from grpo_lib.cli import build_parser
    from grpo_lib.models import MODEL_SIZES
    from grpo_lib.pretrain import SIZE_DEFAULTS

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    size = next(a for a in sub.choices["pretrain"]._actions if a.dest == "size")
    assert list(size.choices) == list(MODEL_SIZES) == list(SIZE_DEFAULTS)
    counts = [count_parameters(random_model(tok, name)) for name in MODEL_SIZES]
    assert counts == sorted(counts) and len(set(counts)) == len(counts)


def test_committed_checkpoints_load_offline_with_auto_classes(monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name, max_params in [("tiny", 5_000_000), ("small", 50_000_000)]:
        path = f"data/models/{name}-qwen2-base"
        model = AutoModelForCausalLM.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
        assert type(model).__name__ == "Qwen2ForCausalLM"
        assert count_parameters(model) <= max_params
        info = json.load(open(f"{path}/pretrain_info.json"))
        assert info["parameters"] == count_parameters(model)
        ids = tokenizer("What is 2 + 3 * 4?", return_tensors="pt")["input_ids"]
        with torch.no_grad():
            assert torch.isfinite(model(ids).logits).all()
    with pytest.raises(FileNotFoundError, match="pretrain"):
        load_model_and_tokenizer("data/models/no-such-model")


def test_tiny_base_model_meets_its_design_bounds():
    """The committed card's numbers (made by `python -m grpo_lib card`)."""
    import pandas as pd

    table = pd.read_csv("data/models/tiny-qwen2-base/eval.csv", index_col=0)
    greedy = table.loc["greedy"]
    assert greedy["n"] >= 500
    assert 0.25 < greedy["strict_acc"] < 0.75
    assert 1 - greedy["format_rate"] >= 0.10
    assert greedy["lang_mix_rate"] >= 0.10


def test_pretraining_runs_and_writes_a_loadable_checkpoint(tmp_path):
    from grpo_lib.pretrain import PretrainConfig, lr_at, pretrain

    cfg = PretrainConfig(size="micro", steps=4, batch_size=4, log_every=1)
    assert lr_at(0, cfg) == pytest.approx(cfg.lr)  # warm-up of one step
    out = pretrain(cfg, tmp_path / "m", eval_n=0)
    model, tok = load_model_and_tokenizer(out)
    assert (out / "README.md").read_text().startswith("# m")
    assert len(open(out / "pretrain_log.csv").read().splitlines()) == 5
    assert not (tmp_path / "m.tmp").exists()


def test_exercise_checkers_accept_the_solution_and_reject_the_mistake():
    assert check_left_to_right(lambda q: evaluate_expression(q, precedence=False))
    with pytest.raises(AssertionError, match="correct"):
        check_left_to_right(lambda q: evaluate_expression(q, precedence=True))
    assert check_precedence_matters(
        lambda q: evaluate_expression(q) != evaluate_expression(q, False))
    with pytest.raises(AssertionError, match="expected"):
        check_precedence_matters(lambda q: "*" in q)


def test_a_damaged_model_folder_is_one_clear_error(tmp_path):
    from grpo_lib.models import (build_tokenizer, load_model_and_tokenizer,
                                 random_model)

    folder = tmp_path / "micro"
    random_model(build_tokenizer(), size="micro", seed=0).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    load_model_and_tokenizer(folder)  # loads while whole
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(OSError, match="model folder .*micro: SafetensorError.*damaged "
                                      "or incomplete"):
        load_model_and_tokenizer(folder)


def test_a_damaged_split_file_names_its_line(tmp_path):
    from grpo_lib.tasks import arithmetic, countdown, read_jsonl

    good = tmp_path / "rows.jsonl"
    good.write_text('{"question": "1 + 2", "answer": "3"}\n\n{"question": "x"}\n')
    assert read_jsonl(good) == [{"question": "1 + 2", "answer": "3"},
                                {"question": "x"}]  # blank lines skipped
    for module, source in ((arithmetic, arithmetic.DATA_DIR),
                           (countdown, countdown.DATA_DIR)):
        folder = tmp_path / module.__name__.rsplit(".", 1)[-1]
        folder.mkdir()
        rows = (source / "test.jsonl").read_text().splitlines()[:3]
        (folder / "test.jsonl").write_text("\n".join(rows + ['{"question": "1 +'])
                                           + "\n")
        with pytest.raises(ValueError, match=r"test.jsonl line 4 is not a JSON "
                                             r"object .*remake it"):
            module.load_split("test", data_dir=folder)
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="line 1 is not a JSON object"):
        read_jsonl(tmp_path / "list.jsonl")
