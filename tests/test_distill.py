"""grpo_lib.distill: the token KL by hand, the mixed loss, and short real runs of a
micro student learning from a micro teacher."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from grpo_lib.distill import (
    DistillConfig,
    DistillTrainer,
    check_same_vocabulary,
    distillation_loss,
    load_config,
    token_kl,
)
from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.sft import IGNORE_INDEX, SFTTrainer, collate, sft_loss, tokenize_rows

REPO = Path(__file__).resolve().parents[1]
CHATS = [
    {"messages": [
        {"role": "user", "content": f"What is {a} + {b}?"},
        {"role": "assistant",
         "content": f"<think> {a} + {b} = {a + b} </think> <answer> {a + b} </answer>"},
    ]}
    for a, b in [(2, 3), (4, 1), (7, 5), (6, 6), (9, 2), (3, 8)]
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _config(tmp_path, **overrides) -> DistillConfig:
    values = dict(output_dir=str(tmp_path / "run"), max_steps=4, learning_rate=1e-2,
                  per_device_train_batch_size=3, progress_bar=False, logging_steps=0,
                  assistant_only_loss=True, distill_alpha=1.0)
    values.update(overrides)
    return DistillConfig(**values)


# ------------------------------------------------------------------------ token_kl
def test_token_kl_is_the_formula_by_hand():
    torch.manual_seed(0)
    s, t = torch.randn(3, 5, 7), torch.randn(3, 5, 7)  # [b, T, V]
    p_t, p_s = t.softmax(-1), s.softmax(-1)
    forward = (p_t * (p_t.log() - p_s.log())).sum(-1)  # KL(p_T || p_S)
    reverse = (p_s * (p_s.log() - p_t.log())).sum(-1)  # KL(p_S || p_T)
    assert torch.allclose(token_kl(s, t), forward, atol=1e-6)
    assert torch.allclose(token_kl(s, t, "reverse"), reverse, atol=1e-6)
    assert not torch.allclose(forward, reverse, atol=1e-3)  # KL is not symmetric
    assert (token_kl(s, t) >= 0).all() and token_kl(t, t).abs().max() < 1e-6
    # torch's own KL (input: the student's log-probs, target: the teacher's)
    torch_kl = F.kl_div(p_s.log(), p_t, reduction="none").sum(-1)
    assert torch.allclose(token_kl(s, t), torch_kl, atol=1e-6)


def test_temperature_softens_both_distributions():
    s, t = torch.tensor([[4.0, 0.0, -2.0]]), torch.tensor([[0.0, 3.0, 1.0]])
    for tau in (0.5, 2.0, 10.0):
        by_hand = token_kl(s / tau, t / tau)
        assert torch.allclose(token_kl(s, t, temperature=tau), by_hand)
    # hotter: both distributions flatten toward uniform and the KL shrinks
    kls = [float(token_kl(s, t, temperature=tau)) for tau in (1.0, 2.0, 10.0)]
    assert kls[0] > kls[1] > kls[2] > 0


def test_forward_kl_punishes_a_missed_mode_and_reverse_kl_a_spread_one():
    """A teacher with two modes; student A puts its mass on one of them, student B
    spreads it over every token. Forward KL prefers B (it covers both modes),
    reverse KL prefers A (it stays inside the teacher's mass)."""
    big = 8.0
    teacher = torch.tensor([[big, big, 0.0, 0.0, 0.0, 0.0]])
    one_mode = torch.tensor([[big, 0.0, 0.0, 0.0, 0.0, 0.0]])
    spread = torch.zeros(1, 6)
    assert token_kl(spread, teacher) < token_kl(one_mode, teacher)
    assert token_kl(one_mode, teacher, "reverse") < token_kl(spread, teacher,
                                                             "reverse")


# --------------------------------------------------------------- distillation_loss
def _batch(tokenizer, rows=CHATS[:3]):
    config = DistillConfig(assistant_only_loss=True)
    return collate(tokenize_rows(rows, tokenizer, config, "rows"),
                   tokenizer.pad_token_id)


def test_alpha_zero_is_the_sft_loss_and_only_kept_tokens_count(tokenizer):
    batch = _batch(tokenizer)
    labels = batch["labels"]
    n = int((labels[:, 1:] != IGNORE_INDEX).sum())
    torch.manual_seed(1)
    s, t = torch.randn(*labels.shape, 512), torch.randn(*labels.shape, 512)
    assert torch.allclose(distillation_loss(s, t, labels, n, alpha=0.0),
                          sft_loss(s, labels, n))
    # a teacher that differs only where no token is kept changes nothing
    t2 = t.clone()
    not_kept = torch.zeros_like(labels, dtype=torch.bool)
    not_kept[:, :-1] = labels[:, 1:] == IGNORE_INDEX  # rows t-1 that predict nothing
    t2[not_kept] = torch.randn(int(not_kept.sum()), 512)
    assert torch.allclose(distillation_loss(s, t, labels, n),
                          distillation_loss(s, t2, labels, n))
    # alpha = 1: the token mean of the KL at the kept positions, times tau^2
    kept = labels[:, 1:] != IGNORE_INDEX
    by_hand = token_kl(s[:, :-1], t[:, :-1], temperature=2.0)[kept].mean() * 4
    assert torch.allclose(distillation_loss(s, t, labels, n, temperature=2.0),
                          by_hand)
    mixed = distillation_loss(s, t, labels, n, alpha=0.25)
    assert torch.allclose(mixed, 0.75 * sft_loss(s, labels, n)
                          + 0.25 * distillation_loss(s, t, labels, n))


def test_the_kl_gradient_is_student_minus_teacher_probabilities(tokenizer):
    """d KL(p_T || p_S) / d z_S = p_S - p_T at each kept position, / N."""
    batch = _batch(tokenizer)
    labels = batch["labels"]
    n = int((labels[:, 1:] != IGNORE_INDEX).sum())
    torch.manual_seed(2)
    s = torch.randn(*labels.shape, 512, requires_grad=True)
    t = torch.randn(*labels.shape, 512)
    distillation_loss(s, t, labels, n).backward()
    kept = labels[:, 1:] != IGNORE_INDEX
    want = (s.detach().softmax(-1) - t.softmax(-1))[:, :-1][kept] / n
    assert torch.allclose(s.grad[:, :-1][kept], want, atol=1e-7)
    assert s.grad[:, :-1][~kept].abs().max() == 0 and s.grad[:, -1].abs().max() == 0


# ------------------------------------------------------------------ the trainer
def test_the_student_moves_toward_the_teacher(tokenizer, tmp_path):
    teacher = random_model(tokenizer, "micro", seed=1)
    student = random_model(tokenizer, "micro", seed=2)
    before = {k: v.clone() for k, v in teacher.state_dict().items()}
    batch = _batch(tokenizer, CHATS)
    n = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())

    def kd(model):
        with torch.no_grad():
            return float(distillation_loss(model(**_inputs(batch)).logits,
                                           teacher(**_inputs(batch)).logits,
                                           batch["labels"], n))

    start = kd(student)
    trainer = DistillTrainer(student, tokenizer, _config(tmp_path, max_steps=12),
                             CHATS, teacher=teacher)
    trainer.train()
    assert kd(student) < 0.5 * start
    for key, value in teacher.state_dict().items():  # the teacher is frozen
        assert torch.equal(value, before[key]), key
    assert not any(p.requires_grad for p in teacher.parameters())
    metrics = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert metrics["loss"].iloc[-1] < metrics["loss"].iloc[0]


def _inputs(batch):
    return dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                position_ids=batch["position_ids"], use_cache=False)


def test_padded_output_rows_are_left_out_of_the_kl(tokenizer, tmp_path):
    """Qwen2.5 pads its embedding table past the tokenizer: a teacher with 600
    output rows for 512 tokens is taken, and the KL ignores the rows past 512."""
    teacher = random_model(tokenizer, "micro", seed=1, vocab_size=600)
    student = random_model(tokenizer, "micro", seed=2)
    trainer = DistillTrainer(student, tokenizer, _config(tmp_path), CHATS,
                             teacher=teacher, teacher_tokenizer=tokenizer)
    batch = _batch(tokenizer)
    n = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
    logits = student(**_inputs(batch)).logits
    with torch.no_grad():
        t = teacher(**_inputs(batch)).logits  # [b, T, 600]
    want = distillation_loss(logits, t[..., :512], batch["labels"], n)
    assert t.shape[-1] == 600 and torch.allclose(trainer._loss(logits, batch, n), want)


@pytest.mark.parametrize("settings", [
    dict(distill_direction="reverse", distill_temperature=2.0),
    dict(distill_alpha=0.5, packing=True, max_length=64),
    dict(distill_alpha=0.3, gradient_accumulation_steps=2,
         per_device_train_batch_size=2),
], ids=["reverse-tau2", "mixed-packed", "accumulated"])
def test_each_setting_trains_toward_the_teacher(tokenizer, tmp_path, settings):
    """The step's loss is the formula's on the whole batch, whatever the split into
    micro-batches or the packing, and training lowers it."""
    teacher = random_model(tokenizer, "micro", seed=1)
    student = random_model(tokenizer, "micro", seed=2)
    config = _config(tmp_path, max_steps=10, **settings)
    trainer = DistillTrainer(student, tokenizer, config, CHATS, teacher=teacher)
    trainer.train()
    losses = pd.read_csv(tmp_path / "run" / "metrics.csv")["loss"]
    assert losses.notna().all() and losses.iloc[-3:].mean() < losses.iloc[:3].mean()


def test_the_reverse_kl_gradient_by_hand(tokenizer):
    """d KL(p_S || p_T) / d z_S = p_S (log p_S - log p_T - KL), and with tau the
    chain rule's 1/tau times the tau^2 in front."""
    batch = _batch(tokenizer)
    labels = batch["labels"]
    n = int((labels[:, 1:] != IGNORE_INDEX).sum())
    torch.manual_seed(4)
    s = torch.randn(*labels.shape, 512, requires_grad=True)
    t = torch.randn(*labels.shape, 512)
    tau = 2.0
    distillation_loss(s, t, labels, n, temperature=tau,
                      direction="reverse").backward()
    log_s, log_t = (s.detach() / tau).log_softmax(-1), (t / tau).log_softmax(-1)
    kl = (log_s.exp() * (log_s - log_t)).sum(-1, keepdim=True)
    want = tau * log_s.exp() * (log_s - log_t - kl) / n
    kept = labels[:, 1:] != IGNORE_INDEX
    assert torch.allclose(s.grad[:, :-1][kept], want[:, :-1][kept], atol=1e-7)


def test_alpha_zero_trains_exactly_as_sft(tokenizer, tmp_path):
    runs = []
    for kind in ("sft", "distill"):
        model = random_model(tokenizer, "micro", seed=3)
        config = _config(tmp_path / kind, distill_alpha=0.0)
        if kind == "sft":
            SFTTrainer(model, tokenizer, config, CHATS).train()
        else:
            DistillTrainer(model, tokenizer, config, CHATS).train()
        runs.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(runs[0], runs[1])


def test_setup_mistakes_are_explained(tokenizer, tmp_path):
    student = random_model(tokenizer, "micro", seed=0)
    with pytest.raises(ValueError, match="needs a teacher model"):
        DistillTrainer(student, tokenizer, _config(tmp_path), CHATS)
    short = random_model(tokenizer, "micro", seed=0, vocab_size=400)
    with pytest.raises(ValueError, match="must share one tokenizer"):
        DistillTrainer(student, tokenizer, _config(tmp_path), CHATS, teacher=short)
    countdown = build_tokenizer(task="countdown")  # the same size, other tokens
    with pytest.raises(ValueError, match="differs from the student's"):
        DistillTrainer(student, tokenizer, _config(tmp_path), CHATS,
                       teacher=random_model(countdown, "micro"),
                       teacher_tokenizer=countdown)
    for field, value, message in (("distill_alpha", 1.5, "a weight in"),
                                  ("distill_alpha", math.nan, "a weight in"),
                                  ("distill_temperature", 0.0, "a number in"),
                                  ("distill_temperature", math.inf, "a number in"),
                                  ("distill_temperature", 1e30, "a number in"),
                                  ("distill_direction", "both", "choose one of")):
        with pytest.raises(ValueError, match=message):
            _config(tmp_path, **{field: value}).validate()
    with pytest.raises(ValueError, match="Invalid SFTConfig"):  # the SFT fields too
        _config(tmp_path, learning_rate=-1.0).validate()


def test_two_vocabularies_are_refused_by_name():
    arithmetic, countdown = build_tokenizer(), build_tokenizer(task="countdown")
    check_same_vocabulary(arithmetic, build_tokenizer())
    with pytest.raises(ValueError, match="differs from the student's"):
        check_same_vocabulary(arithmetic, countdown)


def test_cli_distill_runs_and_reports_setup_errors(tmp_path, monkeypatch, capsys):
    from grpo_lib.cli import main

    monkeypatch.chdir(REPO)  # the config's paths are relative to the repository
    out = tmp_path / "kd"
    student = tmp_path / "student"
    tokenizer = build_tokenizer()
    random_model(tokenizer, "micro", seed=0).save_pretrained(student)
    tokenizer.save_pretrained(student)
    stranger = tmp_path / "stranger"  # the same sizes, another vocabulary
    countdown = build_tokenizer(task="countdown")
    random_model(countdown, "micro", seed=0).save_pretrained(stranger)
    countdown.save_pretrained(stranger)
    common = ["distill", "--config", "configs/ch14_distill.yaml",
              "--set", f"model_name_or_path={student}", "--set", "max_steps=2",
              "--set", "eval_steps=2", "--set", "eval_on_start=false",
              "--set", "progress_bar=false", "--set", "device=cpu"]
    main(common + ["--set", f"output_dir={out}", "--set", "distill_alpha=1"])
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics["step"].tolist() == [1, 2] and metrics["loss"].notna().all()
    assert json.loads((out / "config.json").read_text())["distill_alpha"] == 1.0
    capsys.readouterr()  # the good run's output
    for sets, expected in ((["distill_alpha=2"], "distill_alpha=2: a weight in"),
                           (["teacher_model_name_or_path=null"],
                            "needs teacher_model_name_or_path"),
                           ([f"teacher_model_name_or_path={stranger}"],
                            "differs from the student's")):
        argv = common + ["--set", f"output_dir={tmp_path}/bad",
                         "--set", "distill_alpha=1"]
        for item in sets:
            argv += ["--set", item]
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("python -m grpo_lib distill: error: ") and expected in err
        assert "Traceback" not in err


def test_shipped_distill_config_is_valid():
    config = load_config(REPO / "configs" / "ch14_distill.yaml")
    assert config.teacher_model_name_or_path and config.distill_alpha == 0.0
    assert (REPO / config.train_file).exists()
