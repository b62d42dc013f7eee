"""grpo_lib.sft: the masks, the loss by hand, and short real runs on a micro Qwen2.

The loop around the step (checkpoints, resume, metrics.csv, Ctrl-C, the NaN guard) is
grpo_lib.training_loop, shared with the GRPO trainer; here it is checked on SFT runs.
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import os
import signal
from dataclasses import fields
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from grpo_lib.logprobs import assistant_mask
from grpo_lib.models import build_tokenizer, random_model
from grpo_lib.sft import (
    IGNORE_INDEX,
    SFT_METRIC_COLUMNS,
    SFTConfig,
    SFTTrainer,
    collate,
    load_config,
    pack_examples,
    sft_loss,
    tokenize_rows,
)

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "data" / "models" / "tiny-qwen2-base"

CHATS = [
    {"messages": [
        {"role": "system", "content": "Answer in tags."},
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "<answer> 5 </answer>"},
    ]},
    {"messages": [
        {"role": "user", "content": "What is 4 * 2?"},
        {"role": "assistant",
         "content": "<think> 4 * 2 = 8 </think> <answer> 8 </answer>"},
        {"role": "user", "content": "And 8 - 1?"},
        {"role": "assistant", "content": "<answer> 7 </answer>"},
    ]},
    {"messages": [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi."},
    ]},
]
PAIRS = [
    {"prompt": "Q: 2 + 3 =", "completion": " 5"},
    {"prompt": "Q: 7 - 1 =", "completion": " 6"},
    {"prompt": "Q: 3 * 3 + 1 =", "completion": " 10"},
]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _config(tmp_path, **overrides) -> SFTConfig:
    values = dict(output_dir=str(tmp_path / "run"), max_steps=3, learning_rate=1e-2,
                  per_device_train_batch_size=2, progress_bar=False, logging_steps=0)
    values.update(overrides)
    return SFTConfig(**values)


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


def _hand_loss(model, examples) -> torch.Tensor:
    """Mean over every kept token t of -log p(x_t | x_<t), one sequence at a time."""
    terms = []
    with torch.no_grad():
        for e in examples:
            ids = torch.tensor(e["input_ids"])  # [T]
            logits = model(input_ids=ids[None], use_cache=False).logits[0]  # [T, V]
            kept = [t for t, k in enumerate(e["keep"]) if k]  # targets, t >= 1
            terms.append(F.cross_entropy(logits[[t - 1 for t in kept]], ids[kept],
                                         reduction="none"))
    return torch.cat(terms).mean()


def _loss_and_logit_grad(model, batch):
    """sft_loss on the batch and its gradient with respect to the logits."""
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"],
                       attention_mask=batch["attention_mask"], use_cache=False).logits
    logits.requires_grad_(True)  # [B, T, V]
    n = int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())
    loss = sft_loss(logits, batch["labels"], n)
    loss.backward()
    return loss.detach(), logits, logits.grad


# ------------------------------------------------------------------------ the masks
def test_assistant_only_loss_ignores_every_other_token(tokenizer):
    model = random_model(tokenizer, size="micro", seed=0)
    config = SFTConfig(assistant_only_loss=True)
    examples = tokenize_rows(CHATS, tokenizer, config, "chats")
    for row, e in zip(CHATS, examples):  # the kept tokens are chapter 4's mask
        ids, mask = assistant_mask(tokenizer, row["messages"])
        assert e["input_ids"] == ids.tolist() and e["keep"] == mask.tolist()
        assert e["keep"][0] == 0 and 0 < sum(e["keep"]) < len(e["keep"])
    batch = collate(examples, tokenizer.pad_token_id)
    keep = torch.zeros(batch["labels"].shape, dtype=torch.bool)  # [B, T]
    for i, e in enumerate(examples):
        keep[i, : len(e["keep"])] = torch.tensor(e["keep"]).bool()
    assert torch.equal(batch["labels"] != IGNORE_INDEX, keep)  # padding: no label
    loss, logits, grad = _loss_and_logit_grad(model, batch)
    assert loss.item() == pytest.approx(_hand_loss(model, examples).item(), rel=1e-5)
    # the rows of logits that predict system/user/template/padding tokens get no
    # gradient, and changing them (any other prediction there) leaves the loss as is
    predicts_kept = torch.zeros(batch["labels"].shape, dtype=torch.bool)
    predicts_kept[:, :-1] = batch["labels"][:, 1:] != IGNORE_INDEX  # [B, T]
    assert grad[~predicts_kept].abs().max() == 0 and grad[predicts_kept].abs().sum() > 0
    noisy = logits.detach().clone()
    noisy[~predicts_kept] = torch.randn_like(noisy[~predicts_kept]) * 50
    n = int(predicts_kept.sum())
    assert sft_loss(noisy, batch["labels"], n).item() == loss.item()
    # other prompt words: the same targets, and no target among the new words
    other = [{"messages": [dict(m, content="Please, " + m["content"])
                           if m["role"] != "assistant" else m
                           for m in row["messages"]]} for row in CHATS]
    other_examples = tokenize_rows(other, tokenizer, config, "other")
    for a, b in zip(examples, other_examples):
        assert [t for t, k in zip(a["input_ids"], a["keep"]) if k] == \
            [t for t, k in zip(b["input_ids"], b["keep"]) if k]
    # without assistant_only_loss every token but the first is a target
    everything = tokenize_rows(CHATS, tokenizer, SFTConfig(), "chats")
    assert all(e["keep"] == [0] + [1] * (len(e["keep"]) - 1) for e in everything)


def test_completion_only_loss_ignores_the_prompt(tokenizer):
    model = random_model(tokenizer, size="micro", seed=1)
    examples = tokenize_rows(PAIRS, tokenizer, SFTConfig(), "pairs")  # default: on
    for row, e in zip(PAIRS, examples):
        prompt_ids = tokenizer(row["prompt"])["input_ids"]
        kept = [t for t, k in zip(e["input_ids"], e["keep"]) if k]
        assert e["keep"] == [0] * len(prompt_ids) + [1] * len(kept)
        assert tokenizer.decode(kept) == row["completion"] + tokenizer.eos_token
    batch = collate(examples, tokenizer.pad_token_id)
    loss, logits, grad = _loss_and_logit_grad(model, batch)
    assert loss.item() == pytest.approx(_hand_loss(model, examples).item(), rel=1e-5)
    predicts_kept = torch.zeros(batch["labels"].shape, dtype=torch.bool)
    predicts_kept[:, :-1] = batch["labels"][:, 1:] != IGNORE_INDEX
    assert grad[~predicts_kept].abs().max() == 0
    # completion_only_loss=false trains on the prompt too
    full = tokenize_rows(PAIRS, tokenizer, SFTConfig(completion_only_loss=False), "p")
    assert all(sum(e["keep"]) == len(e["keep"]) - 1 for e in full)
    # conversational prompt-completion: the completion is the assistant turn
    messages = CHATS[0]["messages"]
    chat = [{"prompt": messages[:2], "completion": messages[2:]}]
    (e,) = tokenize_rows(chat, tokenizer, SFTConfig(assistant_only_loss=True), "chat")
    _, mask = assistant_mask(tokenizer, CHATS[0]["messages"])
    assert e["keep"] == mask.tolist()


def test_the_trainers_loss_is_the_token_mean_of_the_batch(tokenizer, tmp_path):
    """Step 1's logged loss is the hand-computed mean over the kept tokens of all rows,
    whether the batch is one micro-batch or split over gradient accumulation."""
    examples = tokenize_rows(CHATS, tokenizer, SFTConfig(assistant_only_loss=True), "c")
    expected = _hand_loss(random_model(tokenizer, size="micro", seed=0), examples)
    for size, accumulation in ((3, 1), (1, 3)):
        trainer = SFTTrainer(
            random_model(tokenizer, size="micro", seed=0), tokenizer,
            _config(tmp_path, max_steps=1, assistant_only_loss=True,
                    per_device_train_batch_size=size,
                    gradient_accumulation_steps=accumulation,
                    output_dir=str(tmp_path / f"run{size}")), CHATS)
        metrics = trainer.train()
        assert metrics["loss"][0] == pytest.approx(expected.item(), rel=1e-5)
        assert metrics["num_tokens"][0] == sum(sum(e["keep"]) for e in examples)


def test_packing_keeps_examples_apart(tokenizer):
    model = random_model(tokenizer, size="micro", seed=0)
    examples = tokenize_rows(CHATS + CHATS, tokenizer, SFTConfig(), "chats")
    packed = pack_examples(examples, max_length=80)
    assert len(packed) < len(examples)
    assert sorted(len(e["input_ids"]) for e in examples) == sorted(
        n for p in packed for n in _segment_lengths(p["position_ids"]))
    assert all(len(p["input_ids"]) <= 80 for p in packed)
    with torch.no_grad():
        one = collate(packed, tokenizer.pad_token_id)
        apart = collate(examples, tokenizer.pad_token_id)
        packed_logits = model(input_ids=one["input_ids"],
                              position_ids=one["position_ids"], use_cache=False).logits
        apart_logits = model(input_ids=apart["input_ids"],
                             attention_mask=apart["attention_mask"],
                             use_cache=False).logits
    assert sft_loss(packed_logits, one["labels"], 1).item() == pytest.approx(
        sft_loss(apart_logits, apart["labels"], 1).item(), rel=1e-5)


def _segment_lengths(position_ids: list[int]) -> list[int]:
    starts = [i for i, p in enumerate(position_ids) if p == 0] + [len(position_ids)]
    return [b - a for a, b in zip(starts, starts[1:])]


# ------------------------------------------------------------------------ config
def test_every_field_has_a_docstring():
    from grpo_lib import sft

    body = ast.parse(inspect.getsource(sft.SFTConfig)).body[0].body
    documented = {
        stmt.target.id
        for stmt, nxt in zip(body, body[1:])
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(nxt, ast.Expr)
        and isinstance(nxt.value, ast.Constant)
        and isinstance(nxt.value.value, str)
    }
    assert {f.name for f in fields(SFTConfig)} - documented == set()


@pytest.mark.parametrize("overrides,message", [
    (dict(per_device_train_batch_size=0), "per_device_train_batch_size=0"),
    (dict(max_steps=0), "or -1 to train for num_train_epochs"),
    (dict(packing=True, max_length=None), "packing=true needs max_length"),
    (dict(lr_scheduler_type="step"), "lr_scheduler_type='step'"),
    (dict(warmup_steps=2.5), "give a whole number of updates"),
])
def test_validate_says_what_to_change(overrides, message):
    with pytest.raises(ValueError, match=message):
        SFTConfig(**overrides).validate()


def test_config_file_and_data_rules(tokenizer, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("max_steps: 4\nlearning_rate: 1e-3\n")
    config = load_config(path, ["packing=true", "max_length=64"])
    assert (config.max_steps, config.learning_rate, config.packing) == (4, 1e-3, True)
    assert config.total_steps(100) == 4
    assert SFTConfig(num_train_epochs=2, per_device_train_batch_size=8,
                     gradient_accumulation_steps=2).total_steps(40) == 5
    with pytest.raises(ValueError, match="did you mean 'max_length'"):
        load_config(path, ["max_len=64"])
    with pytest.raises(ValueError, match="needs prompt-completion data"):
        tokenize_rows(CHATS, tokenizer, SFTConfig(completion_only_loss=True), "d")
    with pytest.raises(ValueError, match="assistant_only_loss=true needs convers"):
        tokenize_rows(PAIRS, tokenizer, SFTConfig(assistant_only_loss=True), "d")
    with pytest.raises(ValueError, match="row 1 'messages' has no assistant message"):
        tokenize_rows([CHATS[0], {"messages": CHATS[0]["messages"][:2]}], tokenizer,
                      SFTConfig(), "d")


# ------------------------------------------------------------------------ real runs
def test_metrics_csv_and_the_nan_guard(tokenizer, tmp_path, capsys):
    """Step 2's logits are NaN: its update is skipped, the parameters stay, the run
    goes on; metrics.csv holds every step in SFT_METRIC_COLUMNS."""
    model = random_model(tokenizer, size="micro", seed=0)
    calls = {"n": 0}

    def nan_on_step_two(module, args, output):  # one forward per step here
        calls["n"] += 1
        return output * math.nan if calls["n"] == 2 else output

    params = []
    trainer = SFTTrainer(model, tokenizer, _config(tmp_path, max_steps=3), CHATS,
                         callbacks=[lambda t, m: params.append(_params(t.model))])
    model.lm_head.register_forward_hook(nan_on_step_two)
    metrics = trainer.train()
    assert metrics["skipped_updates"].tolist() == [0, 1, 0]
    assert torch.equal(params[0], params[1]) and not torch.equal(params[1], params[2])
    assert math.isnan(metrics["loss"][1]) and metrics["loss"][[0, 2]].notna().all()
    assert "the loss is nan (micro-batch 1) -- skipped this update" in \
        capsys.readouterr().out
    on_disk = pd.read_csv(tmp_path / "run" / "metrics.csv")
    assert list(on_disk.columns) == SFT_METRIC_COLUMNS == list(metrics.columns)
    assert on_disk["step"].tolist() == [1, 2, 3]
    assert on_disk["loss"].tolist() == pytest.approx(metrics["loss"].tolist(),
                                                     nan_ok=True)


def test_interrupted_run_resumes_exactly(tokenizer, tmp_path, capsys):
    """A real SIGINT during step 2's update: the step finishes, checkpoint-2 is written,
    and the resumed run's step 3 equals the uninterrupted run's step 3."""
    config = dict(max_steps=3, assistant_only_loss=True, warmup_steps=1,
                  lr_scheduler_type="cosine", gradient_accumulation_steps=2)
    full_model = random_model(tokenizer, size="micro", seed=0)
    full = SFTTrainer(full_model, tokenizer,
                      _config(tmp_path, output_dir=str(tmp_path / "full"), **config),
                      CHATS).train()

    model = random_model(tokenizer, size="micro", seed=0)
    trainer = SFTTrainer(model, tokenizer, _config(tmp_path, **config), CHATS)
    calls = {"n": 0}

    def sigint_in_step_two(module, args, output):  # two forwards per step here
        calls["n"] += 1
        if calls["n"] == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return output

    model.lm_head.register_forward_hook(sigint_in_step_two)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert "Interrupted: saved" in capsys.readouterr().out
    checkpoint = tmp_path / "run" / "checkpoint-2"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert (state["step"], state["epoch"], state["position"]) == (2, 2, 2)
    assert pd.read_csv(tmp_path / "run" / "metrics.csv")["step"].tolist() == [1, 2]

    resumed_model = random_model(tokenizer, size="micro", seed=1)  # weights replaced
    resumed = SFTTrainer(resumed_model, tokenizer,
                         _config(tmp_path, resume_from_checkpoint="latest", **config),
                         CHATS)
    metrics = resumed.train()
    assert resumed.step == 3 and metrics["step"].tolist() == [3]
    assert torch.equal(_params(resumed_model), _params(full_model))
    for column in ("loss", "grad_norm", "lr", "mean_token_accuracy", "num_tokens"):
        assert metrics[column][0] == full[column][2], column
    assert pd.read_csv(tmp_path / "run" / "metrics.csv")["step"].tolist() == [1, 2, 3]


# ------------------------------------------------------------------------ the CLI
def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cli_reports_setup_errors_in_one_line(tmp_path, capsys):
    from grpo_lib.cli import main

    config = REPO / "configs" / "sft_smoke.yaml"
    no_assistant = _write(tmp_path / "no_assistant.jsonl",
                          [CHATS[0], {"messages": CHATS[0]["messages"][:2]}])
    damaged = tmp_path / "damaged.jsonl"  # a file cut short in its second line
    damaged.write_text(json.dumps(CHATS[0]) + "\n" + json.dumps(CHATS[0])[:30] + "\n")
    for sets, expected in (
        ([f"train_file={tmp_path / 'missing.jsonl'}"], "no data file at"),
        ([f"train_file={_write(tmp_path / 'empty.jsonl', [])}"], "is empty"),
        ([f"train_file={no_assistant}"], "row 1 'messages' has no assistant message"),
        ([f"eval_file={damaged}"], "eval_file: " + f"{damaged} line 2 is not a JSON"),
        (["learning_rat=1e-3"], "did you mean 'learning_rate'"),
    ):
        argv = ["sft", "--config", str(config), "--set", f"output_dir={tmp_path}/o"]
        for item in sets:
            argv += ["--set", item]
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("python -m grpo_lib sft: error: ") and expected in err
        assert "Traceback" not in err and err.count("\n") == 1, err


def test_cli_sft_runs_the_smoke_config(tmp_path, monkeypatch):
    from grpo_lib.cli import main

    monkeypatch.chdir(REPO)  # the config's paths are relative to the repository
    out = tmp_path / "sft"
    main(["sft", "--config", "configs/sft_smoke.yaml", "--set", f"output_dir={out}",
          "--set", "max_steps=2", "--set", "eval_steps=2", "--set", "save_steps=0",
          "--set", "progress_bar=false"])
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics["step"].tolist() == [1, 2] and metrics["loss"].notna().all()
    assert pd.read_csv(out / "eval.csv")["step"].tolist() == [2]
    assert json.loads((out / "config.json").read_text())["assistant_only_loss"]


def test_cli_exits_130_after_an_interrupted_run(monkeypatch, tmp_path):
    import grpo_lib.cli as cli
    import grpo_lib.sft as sft

    def interrupted(trainer):
        raise KeyboardInterrupt

    monkeypatch.setattr(sft, "trainer_from_yaml", lambda path, overrides: None)
    monkeypatch.setattr(sft, "run_training", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["sft", "--config", str(tmp_path / "any.yaml")])
    assert exit_info.value.code == 130


def test_shipped_sft_configs_are_valid():
    """Every config in configs/ that names a train_file is an SFTConfig."""
    import yaml

    paths = [p for p in sorted((REPO / "configs").glob("*.yaml"))
             if "train_file" in yaml.safe_load(p.read_text())
             and "teacher_model_name_or_path" not in yaml.safe_load(p.read_text())]
    assert REPO / "configs" / "sft_smoke.yaml" in paths
    for path in paths:
        assert load_config(path).train_file, path
