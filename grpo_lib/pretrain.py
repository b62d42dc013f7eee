"""Pretraining the book's base model on the designed corpus (``python -m grpo_lib
pretrain``).

A plain causal-LM loop: AdamW, linear warm-up then cosine decay to 10%, bf16 autocast on
a GPU, a CSV log, tqdm. The result is a folder that
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load
offline, with a model card (``README.md``) that records the config, corpus mix, tokens
seen, steps, wall time, device, final loss and the evaluation table.
"""
from __future__ import annotations

import csv
import json
import math
import os
import platform
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .corpus import CorpusMix, document_text, sample_documents
from .models import build_tokenizer, count_parameters, random_model
from .tasks.arithmetic import DATA_DIR, Problem, load_split, read_rows, solve_steps

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class PretrainConfig:
    """Settings of one pretraining run (defaults are the tiny model's)."""

    size: str = "tiny"  # model size name in grpo_lib.models.MODEL_SIZES
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


SIZE_DEFAULTS = {
    "micro": dict(steps=200, batch_size=32, lr=3e-3),
    "tiny": dict(steps=3000, batch_size=64, lr=3e-3),
    "small": dict(steps=4000, batch_size=128, lr=1e-3),
}


def lr_at(step: int, cfg: PretrainConfig) -> float:
    """Warm-up then cosine: lr·s/w for s < w, else lr·(m + (1-m)·(1+cos(π·p))/2)."""
    warmup = max(1, int(cfg.warmup_frac * cfg.steps))
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - warmup)
    cos_term = 1 + math.cos(math.pi * progress)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * cos_term)


def _train_problems() -> list[Problem]:
    rows = read_rows("train")
    return [Problem(r["question"], int(r["answer"]), r["num_operands"], r["has_parens"],
                    r["precedence_matters"], solve_steps(r["question"])) for r in rows]


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


def pretrain(cfg: PretrainConfig, out_dir: str | Path, eval_n: int = 500) -> Path:
    """Pretrain a model of ``cfg.size`` and write a checkpoint folder to ``out_dir``."""
    from tqdm.auto import tqdm

    out = Path(out_dir)
    random.seed(cfg.seed)
    device = torch.device(cfg.device)
    tokenizer = build_tokenizer(cfg.vocab_size)
    model = random_model(tokenizer, cfg.size, seed=cfg.seed).to(device)  # seeds torch
    n_params = count_parameters(model)
    problems = _train_problems()
    docs = sample_documents(problems, cfg.steps * cfg.batch_size, mix=cfg.mix,
                            seed=cfg.seed)
    texts = _length_bucketed([document_text(d, tokenizer) for d in docs],
                             cfg.batch_size, cfg.seed)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=cfg.lr, betas=(0.9, 0.95), fused=False)
    use_bf16 = bf16_autocast_supported(device)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log_path = tmp / "pretrain_log.csv"
    tokens_seen, t0, losses = 0, time.time(), []
    model.train()
    with open(log_path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["step", "loss", "lr", "tokens_seen", "elapsed_s"])
        bar = tqdm(range(cfg.steps), desc=f"pretrain {cfg.size}", mininterval=2.0,
                   disable=not cfg.progress)
        for step in bar:
            batch_texts = texts[step * cfg.batch_size:(step + 1) * cfg.batch_size]
            enc = tokenizer(batch_texts, return_tensors="pt", padding=True,
                            padding_side="right")
            input_ids = enc["input_ids"].to(device)  # [B, T]
            attention_mask = enc["attention_mask"].to(device)  # [B, T]
            # no loss on padding
            labels = input_ids.masked_fill(attention_mask == 0, -100)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, cfg)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
                loss = model(input_ids=input_ids, attention_mask=attention_mask,
                             labels=labels).loss
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"pretraining loss became {loss.item()} at step {step}; lower --lr "
                    f"(now {cfg.lr})")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            tokens_seen += int(attention_mask.sum())
            losses.append(loss.item())
            if step % cfg.log_every == 0 or step == cfg.steps - 1:
                writer.writerow([step, f"{loss.item():.4f}", f"{lr_at(step, cfg):.3e}",
                                 tokens_seen, f"{time.time() - t0:.1f}"])
                bar.set_postfix(loss=f"{loss.item():.3f}")
        bar.close()
    wall = time.time() - t0
    model.eval()
    if cfg.save_dtype != "float32":
        model = model.to(getattr(torch, cfg.save_dtype))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)

    info = _run_info(cfg, model, n_params, texts, tokens_seen, wall, losses, device)
    (tmp / "pretrain_info.json").write_text(json.dumps(info, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    print(f"wrote {out} ({n_params:,} parameters, {tokens_seen:,} tokens, "
          f"{wall / 60:.1f} min on {_device_name(device)})")
    write_model_card(out, eval_n=eval_n, seed=cfg.seed)
    return out


_ARCHITECTURE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers",
                      "num_attention_heads", "num_key_value_heads", "vocab_size")


def _run_info(cfg, model, n_params, texts, tokens_seen, wall, losses, device) -> dict:
    return {
        "size": cfg.size, "parameters": n_params, "steps": cfg.steps,
        "batch_size": cfg.batch_size, "documents": len(texts),
        "tokens_seen": tokens_seen, "wall_time_s": round(wall, 1),
        "device": _device_name(device), "torch_threads": torch.get_num_threads(),
        "final_loss_mean_last_50": round(sum(losses[-50:]) / len(losses[-50:]), 4),
        "config": {k: v for k, v in asdict(cfg).items() if k != "mix"},
        "corpus_mix": asdict(cfg.mix),
        "model_config": {k: v for k, v in model.config.to_dict().items()
                         if k in _ARCHITECTURE_KEYS},
    }


def write_model_card(out_dir: str | Path, eval_n: int = 500, seed: int = 0,
                     device: str | None = None) -> Path:
    """Evaluate a pretrained checkpoint with the harness and (re)write its
    ``README.md``.

    Reads ``pretrain_info.json`` from the folder; ``eval_n`` held-out problems, greedy
    and 4 samples per prompt at temperature 1; the table is also saved as ``eval.csv``.
    """
    from .evaluation import evaluate
    from .models import load_model_and_tokenizer

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
        table = evaluate(model, tokenizer, load_split("test"), n=eval_n, batch_size=128,
                         num_samples=4, temperature=1.0, seed=seed)
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
    lines = [
        f"# {out.name}",
        "",
        f"A {info['parameters']:,}-parameter `Qwen2ForCausalLM` pretrained from "
        f"scratch by `grpo_lib` on the book's designed arithmetic corpus (see "
        f"`grpo_lib/corpus.py`). It is a *base model with designed flaws*: later "
        f"chapters fix them with RL.",
        "",
        "Made by:",
        "",
        "```bash",
        f"python -m grpo_lib pretrain --size {info['size']} --steps {info['steps']} "
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
        "Corpus mix (`grpo_lib.corpus.CorpusMix`):",
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
                  f"held-out `data/arithmetic/test.jsonl`, on "
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


def pretrain_from_args(args) -> Path:
    """Entry point of ``python -m grpo_lib pretrain``."""
    from .profiles import profile

    defaults = SIZE_DEFAULTS[args.size]
    cfg = PretrainConfig(
        size=args.size,
        steps=args.steps or defaults["steps"],
        batch_size=args.batch_size or defaults["batch_size"],
        lr=args.lr or defaults["lr"],
        seed=args.seed,
        device=args.device or profile().device,
        save_dtype=args.save_dtype,
    )
    if cfg.steps < 1 or cfg.batch_size < 1 or cfg.lr <= 0:
        raise ValueError(f"steps, batch size and lr must be positive, got {cfg.steps}, "
                         f"{cfg.batch_size}, {cfg.lr}")
    out = args.out or (DATA_DIR.parent / "models" / f"{args.size}-qwen2-base")
    return pretrain(cfg, out, eval_n=args.eval_n)
