"""Pretraining the book's base model on the designed corpus (``python -m grpo_lib
pretrain``).

A plain causal-LM loop: AdamW, linear warm-up then cosine decay to 10%, bf16 autocast on
a GPU, a CSV log, tqdm. It runs on the loop the GRPO and SFT trainers share
(:mod:`grpo_lib.training_loop`): checkpoints, Ctrl-C, exact resume and the NaN guard are
the same code. The result is a folder that ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load offline, with a model card (``README.md``) that
records the config, corpus mix, tokens seen, steps, wall time, device, final loss and
the evaluation table.
"""
from __future__ import annotations

import json
import os
import platform
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from . import checkpoints
from .corpus import CorpusMix, document_text, sample_documents
from .models import build_tokenizer, count_parameters, random_model
from .tasks.arithmetic import DATA_DIR, Problem, read_rows
from .training_loop import (
    RunSettings,
    TrainingLoop,
    deferred_sigint,
    guarded_optimizer_step,
    lr_multiplier,
    lr_scheduler,
    nonfinite_loss,
)

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class PretrainConfig:
    """Settings of one pretraining run (defaults are the tiny model's)."""

    size: str = "tiny"  # model size name in grpo_lib.models.MODEL_SIZES
    task: str = "arithmetic"  # corpus: arithmetic (corpus.py) or countdown
    init_from: str | None = None  # continue a pretrained model (and its tokenizer)
    countdown_mix: str = "tree"  # Countdown corpus: a name in COUNTDOWN_MIXES
    steps: int = 3000  # optimizer steps
    batch_size: int = 64  # documents per step
    lr: float = 3e-3  # peak learning rate
    warmup_frac: float = 0.05  # share of steps with linear warm-up
    min_lr_frac: float = 0.1  # cosine decays to this share of lr
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 0
    vocab_size: int = 512
    device: str = "cpu"
    mix: CorpusMix = field(default_factory=CorpusMix)
    log_every: int = 25
    save_dtype: str = "float32"  # saved weights' dtype ("bfloat16" halves the file)
    progress: bool = True  # tqdm bar; notebooks turn it off and print the log instead
    save_every: int = 0  # write a checkpoint every N steps (0: only on Ctrl-C)
    resume_from_checkpoint: str | None = None  # checkpoint-<step> folder, or "latest"
    overwrite_output_dir: bool = False  # a fresh run may delete an earlier run's ones

    def to_dict(self) -> dict:
        """The settings as a plain dict (checkpoints record it)."""
        return asdict(self)


SIZE_DEFAULTS = {
    "micro": dict(steps=200, batch_size=32, lr=3e-3),
    "mini": dict(steps=3000, batch_size=64, lr=3e-3),
    "tiny": dict(steps=3000, batch_size=64, lr=3e-3),
    "small": dict(steps=4000, batch_size=128, lr=1e-3),
}


def _warmup(cfg: PretrainConfig) -> int:
    """Warm-up steps: ``warmup_frac`` of all steps, at least 1."""
    return max(1, int(cfg.warmup_frac * cfg.steps))


def lr_at(step: int, cfg: PretrainConfig) -> float:
    """Warm-up then cosine: lr·(s+1)/w for s < w, else lr·(m + (1-m)·(1+cos(π·p))/2),
    with the floor ``m = min_lr_frac`` (grpo_lib.training_loop.lr_multiplier)."""
    return cfg.lr * lr_multiplier(step, cfg.steps, _warmup(cfg), "cosine",
                                  min_lr_rate=cfg.min_lr_frac)


PRETRAIN_TASKS = ("arithmetic", "countdown")
EVAL_TOKENS = {"arithmetic": 96, "countdown": 256}  # harness max_new_tokens per task


def _train_problems() -> list[Problem]:
    rows = read_rows("train")
    return [Problem.from_row(r) for r in rows]


_CORPUS_SETTINGS = ("task", "mix", "countdown_mix", "steps", "batch_size", "seed")
"""The settings that decide a pretraining run's documents and their order."""


def corpus_documents(cfg: PretrainConfig) -> list[dict]:
    """The run's ``steps x batch_size`` documents, from the task's training split."""
    n = cfg.steps * cfg.batch_size
    if cfg.task == "countdown":
        from .countdown_corpus import countdown_documents
        from .tasks.countdown import load_split as countdown_split

        rows = countdown_split("train").remove_columns("prompt").to_list()
        return countdown_documents(rows, n, mix=_countdown_mix(cfg.countdown_mix),
                                   seed=cfg.seed)
    return sample_documents(_train_problems(), n, mix=cfg.mix, seed=cfg.seed)


def bf16_autocast_supported(device: torch.device) -> bool:
    """bf16 autocast where the hardware does bf16 natively (CUDA, or a CPU with
    AVX512-BF16/AMX).

    On such a CPU it halves the tiny model's step time; elsewhere it would be emulated
    and slower, so training stays in float32. Master weights and optimizer states stay
    float32.
    """
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _length_bucketed(texts: list[str], batch_size: int, seed: int,
                     window: int = 16) -> list[str]:
    """Reorder so each batch holds documents of similar length (less padding, same
    data).

    Within windows of ``window`` batches, documents are sorted by length and cut into
    batches; the batches are then shuffled so that lengths do not trend over training.
    """
    rng = random.Random(seed)
    batches = []
    span = window * batch_size
    for start in range(0, len(texts), span):
        chunk = sorted(texts[start:start + span], key=len)
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return [t for b in batches for t in b]


class Pretrainer(TrainingLoop):
    """The causal-LM loss on every token of the designed corpus, one batch per step.

    Runs on :class:`~grpo_lib.training_loop.TrainingLoop`, as the GRPO and SFT trainers
    do: ``pretrain_log.csv``, checkpoints every ``save_every`` steps, Ctrl-C (a
    checkpoint, then stop), exact resume and the NaN guard. The run's folder is
    ``<out_dir>.tmp``; :meth:`train_and_save` turns it into the model folder
    ``out_dir`` when the last step is done.
    """

    log_files = ("pretrain_log.csv",)
    metrics_file = "pretrain_log.csv"
    config_file = None  # the model folder's config.json is the model's

    def __init__(self, cfg: PretrainConfig, out_dir: str | Path,
                 callbacks: Sequence[Callable] | None = None):
        self.config, self.out_dir = cfg, Path(out_dir)
        self.bar_label = f"pretrain {cfg.size}"
        device = torch.device(cfg.device)
        if cfg.task not in PRETRAIN_TASKS:
            raise ValueError(f"no pretraining corpus for task {cfg.task!r}; choose "
                             f"from {PRETRAIN_TASKS}")
        if cfg.init_from:  # continued pretraining: the model's own tokenizer
            from .models import load_model_and_tokenizer

            self.model, self.tokenizer = load_model_and_tokenizer(cfg.init_from)
            self.model = self.model.float().to(device)
        else:
            self.tokenizer = build_tokenizer(cfg.vocab_size, task=cfg.task)
            self.model = random_model(self.tokenizer, cfg.size, seed=cfg.seed)
            self.model = self.model.to(device)
        docs = corpus_documents(cfg)
        texts = _length_bucketed([document_text(d, self.tokenizer) for d in docs],
                                 cfg.batch_size, cfg.seed)
        self.train_rows = [{"text": t} for t in texts]
        named = list(self.model.named_parameters())
        self.optimizer = torch.optim.AdamW(
            [{"params": [p for n, p in named if p.dim() >= 2],
              "weight_decay": cfg.weight_decay},
             {"params": [p for n, p in named if p.dim() < 2], "weight_decay": 0.0}],
            lr=cfg.lr, betas=(0.9, 0.95), fused=False)
        self.scheduler = lr_scheduler(self.optimizer, cfg.steps, _warmup(cfg), "cosine",
                                      min_lr_rate=cfg.min_lr_frac)
        self.use_bf16 = bf16_autocast_supported(device)
        self.tokens_seen, self.elapsed, self.losses = 0, 0.0, []
        self._start_loop(RunSettings(
            output_dir=self.out_dir.with_name(self.out_dir.name + ".tmp"),
            max_steps=cfg.steps, seed=cfg.seed, save_every=cfg.save_every,
            log_every=cfg.log_every, progress_bar=cfg.progress,
            resume_from_checkpoint=cfg.resume_from_checkpoint,
            overwrite_output_dir=cfg.overwrite_output_dir), callbacks)

    def _order(self, epoch: int) -> np.ndarray:
        """The documents in their length-bucketed order (already shuffled)."""
        return np.arange(len(self.train_rows))

    def train_step(self) -> dict:
        """One step: the next ``batch_size`` documents, the loss on every token (no
        loss on padding), one AdamW update behind the NaN guard."""
        cfg, t0 = self.config, time.time()
        lr = self.optimizer.param_groups[0]["lr"]
        texts = [row["text"] for row in self._next_rows(cfg.batch_size)]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True,
                             padding_side="right")
        input_ids = enc["input_ids"].to(self.device)  # [B, T]
        attention_mask = enc["attention_mask"].to(self.device)  # [B, T]
        labels = input_ids.masked_fill(attention_mask == 0, -100)  # [B, T]
        with deferred_sigint(self._flag):
            self.model.train()
            with torch.autocast(self.device.type, dtype=torch.bfloat16,
                                enabled=self.use_bf16):
                loss = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                  labels=labels).loss
            self.optimizer.zero_grad(set_to_none=True)
            problem = nonfinite_loss(loss, f"lr {lr:.2e}")
            if problem is None:
                loss.backward()
            _, problem = guarded_optimizer_step(self.model, self.optimizer,
                                                self.scheduler, cfg.max_grad_norm,
                                                problem)
            if problem is not None:
                self._skip_update(problem, f"Lower --lr (now {cfg.lr}).")
            self.step += 1
        self.tokens_seen += int(attention_mask.sum())
        self.losses = (self.losses + [loss.item()])[-50:]
        self.elapsed += time.time() - t0
        return {"step": self.step, "loss": round(loss.item(), 4),
                "lr": float(f"{lr:.3e}"), "tokens_seen": self.tokens_seen,
                "elapsed_s": round(self.elapsed, 1)}

    def _progress_postfix(self, metrics: dict) -> dict:
        return {"loss": f"{metrics['loss']:.3f}"}

    def _metric_columns(self) -> list[str]:
        return ["step", "loss", "lr", "tokens_seen", "elapsed_s"]

    @staticmethod
    def _summary_line(m: dict) -> str:
        return f"step {int(m['step']):>5} | loss {m['loss']:.4f} | lr {m['lr']:.2e}"

    def _trainer_state(self) -> dict:
        return {"tokens_seen": self.tokens_seen, "elapsed_s": self.elapsed,
                "last_losses": self.losses}

    def _restore_trainer_state(self, state: dict) -> None:
        saved, now = state.get("config", {}), self.config.to_dict()
        differ = [f"{k}={saved[k]!r} (now {now[k]!r})" for k in _CORPUS_SETTINGS
                  if k in saved and k in now and saved[k] != now[k]]
        if differ:
            raise ValueError(
                "the checkpoint was made with " + ", ".join(differ) + ". The corpus "
                "and its document order are drawn from steps x batch_size documents "
                "of that task, mix and seed, so resuming with other values would "
                "repeat some documents and skip others; resume with the checkpoint's "
                "values, or start a new run.")
        self.tokens_seen, self.elapsed = state["tokens_seen"], state["elapsed_s"]
        self.losses = state["last_losses"]

    def train_and_save(self, eval_n: int = 500) -> Path:
        """Train to the last step, then write the model folder ``out_dir`` (the run's
        checkpoints are deleted) and its model card."""
        self.train()
        run_dir, out, cfg = self.output_dir, self.out_dir, self.config
        checkpoints.delete_checkpoints(run_dir)
        model = self.model.eval()
        n_params = count_parameters(model)
        if cfg.save_dtype != "float32":
            model = model.to(getattr(torch, cfg.save_dtype))
        model.save_pretrained(run_dir)
        self.tokenizer.save_pretrained(run_dir)
        info = _run_info(cfg, model, n_params, len(self.train_rows), self.tokens_seen,
                         self.elapsed, self.losses, self.device)
        (run_dir / "pretrain_info.json").write_text(json.dumps(info, indent=2))
        shutil.rmtree(out, ignore_errors=True)
        os.replace(run_dir, out)
        print(f"wrote {out} ({n_params:,} parameters, {self.tokens_seen:,} tokens, "
              f"{self.elapsed / 60:.1f} min on {_device_name(self.device)})")
        write_model_card(out, eval_n=eval_n, seed=cfg.seed)
        return out


def pretrain(cfg: PretrainConfig, out_dir: str | Path, eval_n: int = 500) -> Path:
    """Pretrain a model of ``cfg.size`` and write a checkpoint folder to ``out_dir``."""
    return Pretrainer(cfg, out_dir).train_and_save(eval_n=eval_n)


_ARCHITECTURE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers",
                      "num_attention_heads", "num_key_value_heads", "vocab_size")


def _run_info(cfg, model, n_params, documents, tokens_seen, wall, losses,
              device) -> dict:
    return {
        "size": cfg.size, "parameters": n_params, "steps": cfg.steps,
        "batch_size": cfg.batch_size, "documents": documents,
        "tokens_seen": tokens_seen, "wall_time_s": round(wall, 1),
        "device": _device_name(device), "torch_threads": torch.get_num_threads(),
        "final_loss_mean_last_50": round(sum(losses[-50:]) / len(losses[-50:]), 4),
        "config": {k: v for k, v in asdict(cfg).items() if k != "mix"},
        "task": cfg.task,
        "corpus_mix": asdict(cfg.mix) if cfg.task == "arithmetic" else
        asdict(_countdown_mix(cfg.countdown_mix)),
        "model_config": {k: v for k, v in model.config.to_dict().items()
                         if k in _ARCHITECTURE_KEYS},
    }


def _countdown_mix(name: str = "tree"):
    from .countdown_corpus import COUNTDOWN_MIXES

    if name not in COUNTDOWN_MIXES:
        raise ValueError(f"unknown Countdown corpus mix {name!r}; choose from "
                         f"{sorted(COUNTDOWN_MIXES)}")
    return COUNTDOWN_MIXES[name]


def write_model_card(out_dir: str | Path, eval_n: int = 500, seed: int = 0,
                     device: str | None = None) -> Path:
    """Evaluate a pretrained checkpoint with the harness and (re)write its
    ``README.md``.

    Reads ``pretrain_info.json`` from the folder; ``eval_n`` held-out problems, greedy
    and 4 samples per prompt at temperature 1; the table is also saved as ``eval.csv``.
    """
    from .evaluation import evaluate
    from .models import load_model_and_tokenizer
    from .tasks import load_task_split

    out = Path(out_dir)
    info_path = out / "pretrain_info.json"
    if not info_path.exists():
        raise FileNotFoundError(f"{info_path} is missing: is {out} a folder written by "
                                f"`python -m grpo_lib pretrain`?")
    info = json.loads(info_path.read_text())
    table = None
    if eval_n > 0:
        dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model, tokenizer = load_model_and_tokenizer(out, device=dev)
        t0 = time.time()
        task = info.get("task", "arithmetic")
        table = evaluate(model, tokenizer, load_task_split(task, "test"), n=eval_n,
                         batch_size=128, num_samples=4, temperature=1.0, seed=seed,
                         max_new_tokens=EVAL_TOKENS[task])
        table.to_csv(out / "eval.csv")
        info["eval_device"] = _device_name(torch.device(dev))
        info["eval_wall_time_s"] = round(time.time() - t0, 1)
        info_path.write_text(json.dumps(info, indent=2))
        print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    elif (out / "eval.csv").exists():  # keep the last evaluation
        import pandas as pd

        table = pd.read_csv(out / "eval.csv", index_col=0)
    (out / "README.md").write_text(_model_card(info, table, out))
    return out


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"


def _model_card(info: dict, table, out: Path) -> str:
    rel = out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out
    task = info.get("task", "arithmetic")
    corpus, module, test_file = {
        "arithmetic": ("arithmetic", "corpus.py", "data/arithmetic/test.jsonl"),
        "countdown": ("Countdown", "countdown_corpus.py", "data/countdown/test.jsonl"),
    }[task]
    task_flag = "" if task == "arithmetic" else f"--task {task} "
    lines = [
        f"# {out.name}",
        "",
        f"A {info['parameters']:,}-parameter `Qwen2ForCausalLM` pretrained "
        + (f"from `{info['config']['init_from']}` (its weights and tokenizer) "
           if info["config"].get("init_from") else "from scratch ")
        + f"by `grpo_lib` on the book's designed {corpus} corpus (see "
        f"`grpo_lib/{module}`). It is a *base model with designed flaws*: later "
        f"chapters fix them with RL.",
        "",
        "Made by:",
        "",
        "```bash",
        f"python -m grpo_lib pretrain {task_flag}--size {info['size']} "
        + (f"--init-from {info['config']['init_from']} "
           if info["config"].get("init_from") else "")
        + (f"--countdown-mix {info['config']['countdown_mix']} "
           if info["config"].get("countdown_mix", "tree") != "tree" else "") +
        f"--steps {info['steps']} "
        f"--batch-size {info['batch_size']} --lr {info['config']['lr']} "
        f"--seed {info['config']['seed']} "
        f"--save-dtype {info['config'].get('save_dtype', 'float32')} "
        f"--device {info['config']['device']} --out {rel}",
        "```",
        "",
        "| what | value |", "| --- | --- |",
        f"| parameters | {info['parameters']:,} |",
        f"| architecture | {json.dumps(info['model_config'])} |",
        f"| steps x batch | {info['steps']} x {info['batch_size']} documents |",
        f"| tokens seen | {info['tokens_seen']:,} |",
        f"| wall time | {info['wall_time_s'] / 60:.1f} min |",
        f"| device | {info['device']} |",
        f"| final loss (mean of last 50 steps) | {info['final_loss_mean_last_50']} |",
        "",
        "Corpus mix (`grpo_lib.corpus.CorpusMix`):" if task == "arithmetic" else
        "Corpus mix (`grpo_lib.countdown_corpus.CountdownMix`):",
        "",
        "```json", json.dumps(info["corpus_mix"], indent=1), "```", "",
    ]
    if table is not None:
        n_eval = int(table["n"].iloc[0])
        if _has_tabulate():
            shown = table.to_markdown(floatfmt=".3f")
        else:
            shown = ("```\n" + table.to_string(float_format=lambda v: f"{v:.3f}")
                     + "\n```")
        lines += [f"Evaluation (`grpo_lib.evaluate`, the first {n_eval} problems of "
                  f"held-out `{test_file}`, on "
                  f"{info.get('eval_device', '?')}; `python -m grpo_lib card {rel}`):",
                  "", shown, ""]
    lines += ["Load offline:", "", "```python",
              "from transformers import AutoModelForCausalLM, AutoTokenizer",
              f"model = AutoModelForCausalLM.from_pretrained('{rel}')",
              f"tokenizer = AutoTokenizer.from_pretrained('{rel}')", "```", ""]
    return "\n".join(lines)


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False


def pretrainer_from_args(args) -> Pretrainer:
    """The run ``python -m grpo_lib pretrain`` asks for, checked before any training."""
    from .profiles import profile

    defaults = SIZE_DEFAULTS[args.size]
    cfg = PretrainConfig(
        size=args.size,
        task=getattr(args, "task", "arithmetic"),
        init_from=getattr(args, "init_from", None),
        countdown_mix=getattr(args, "countdown_mix", "tree"),
        steps=args.steps or defaults["steps"],
        batch_size=args.batch_size or defaults["batch_size"],
        lr=args.lr or defaults["lr"],
        seed=args.seed,
        device=args.device or profile().device,
        save_dtype=args.save_dtype,
        save_every=args.save_every,
        resume_from_checkpoint=args.resume_from_checkpoint,
        overwrite_output_dir=args.overwrite_output_dir,
    )
    if cfg.steps < 1 or cfg.batch_size < 1 or cfg.lr <= 0:
        raise ValueError(f"steps, batch size and lr must be positive, got {cfg.steps}, "
                         f"{cfg.batch_size}, {cfg.lr}")
    name = f"{args.size}-qwen2-base" if cfg.task == "arithmetic" else \
        f"{args.size}-qwen2-{cfg.task}-base"
    out = args.out or (DATA_DIR.parent / "models" / name)
    return Pretrainer(cfg, out)
