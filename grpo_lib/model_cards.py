"""Export a trained checkpoint as a small model folder with its model card.

A run's ``checkpoint-<step>/`` holds the optimizer and RNG state for resuming; the book
commits only what loads a model (weights, config, tokenizer) under ``data/models/``,
with a ``README.md`` that says how it was made and what it scores:

    python -m grpo_lib export --run runs/cold_start_annotator --out DIR

with ``DIR`` such as ``data/models/tiny-qwen2-cold-start``. A model trained on the
non-reasoning skills gets their held-out scores on its card too:

    python -m grpo_lib.model_cards add-skills DIR
"""
from __future__ import annotations

import json
import platform
import shutil
from pathlib import Path

from .checkpoints import checkpoint_dirs

#: the files a model folder needs; a checkpoint's optimizer/scheduler/RNG state stays
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors",
               "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def latest_checkpoint(run_dir: str | Path) -> Path:
    """The checkpoint of ``run_dir`` with the highest step."""
    found = checkpoint_dirs(run_dir)
    if not found:
        raise FileNotFoundError(f"{run_dir} has no checkpoint-<step> folder; train "
                                f"with save_final: true (or save_steps) first")
    return found[-1]


def copy_model_files(checkpoint: Path, out: Path) -> list[str]:
    """Copy the files of :data:`MODEL_FILES` that exist from ``checkpoint`` to
    ``out``."""
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} already has files; pick another folder or delete "
                              f"it first")
    out.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in MODEL_FILES:
        if (checkpoint / name).exists():
            shutil.copy2(checkpoint / name, out / name)
            copied.append(name)
    if "model.safetensors" not in copied:
        raise FileNotFoundError(f"{checkpoint} has no model.safetensors")
    return copied


def run_summary(run_dir: Path) -> dict:
    """Steps, wall time and settings of a run, read from its config.json and
    metrics.csv."""
    import pandas as pd

    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    metrics = pd.read_csv(run_dir / "metrics.csv")
    time_col = "time_step" if "time_step" in metrics else None
    return {"config": config, "steps": int(metrics["step"].max()),
            "train_seconds": float(metrics[time_col].sum()) if time_col else None}


def data_cell(train_file) -> str:
    """The card's data cell: the file in backticks, or each file of a data mixture
    (a list) in backticks joined by ``+``."""
    if not train_file:
        return "see the settings"
    files = train_file if isinstance(train_file, (list, tuple)) else [train_file]
    return " + ".join(f"`{f}`" for f in files)


def card_text(name: str, command: str, summary: dict, table, eval_note: str) -> str:
    """The README of an exported model (Markdown)."""
    from .display import cpu_model

    seconds = summary["train_seconds"]
    wall = f"{seconds:.0f} s of steps" if seconds is not None else "not logged"
    settings = json.dumps(summary["config"], indent=1)
    return "\n".join([
        f"# {name}", "",
        "A `Qwen2ForCausalLM` made by `grpo_lib` (weights, config and tokenizer only).",
        "", "Made by:", "", "```bash", command, "```", "",
        "| what | value |", "| --- | --- |",
        f"| base | `{summary['config'].get('model_name_or_path', '?')}` |",
        f"| data | {data_cell(summary['config'].get('train_file'))} |",
        f"| seed | {summary['config'].get('seed', '?')} |",
        f"| steps | {summary['steps']} |",
        f"| training time | {wall} |",
        f"| machine | {cpu_model()} ({platform.machine()}) |", "",
        f"Evaluation ({eval_note}):", "", table.to_markdown(floatfmt=".3f"), "",
        "Settings (`config.json` of the run):", "", "```json", settings, "```", "",
    ])


def export_model(run_dir: str | Path, out: str | Path, command: str,
                 eval_n: int = 500, max_new_tokens: int = 128) -> Path:
    """Copy the run's last checkpoint's model files to ``out``, evaluate them on the
    first ``eval_n`` held-out problems of the run's task (greedy) and write
    ``README.md``."""
    from .evaluation import evaluate
    from .models import load_model_and_tokenizer
    from .tasks import load_task_split

    run_dir, out = Path(run_dir), Path(out)
    checkpoint = latest_checkpoint(run_dir)
    task = run_summary(run_dir)["config"].get("task", "arithmetic")
    copy_model_files(checkpoint, out)
    model, tokenizer = load_model_and_tokenizer(out, device="cpu")
    table = evaluate(model, tokenizer, load_task_split(task, "test"), n=eval_n,
                     max_new_tokens=max_new_tokens)
    table.to_csv(out / "eval.csv")
    note = (f"`grpo_lib.evaluate`, the first {eval_n} problems of "
            f"`data/{task}/test.jsonl`, greedy, at most {max_new_tokens} new "
            f"tokens, on the CPU")
    text = card_text(out.name, command, run_summary(run_dir), table, note)
    (out / "README.md").write_text(text, encoding="utf-8")
    print(table.to_string())
    print(f"exported {checkpoint} -> {out}")
    return out


# ======================================================================================
# Non-reasoning skills on the card (``python -m grpo_lib.model_cards add-skills DIR``)
# ======================================================================================
SKILLS_MARKER = "<!-- skills -->"
"""The line that starts the skills section of a card (rewritten on each call)."""


def _shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def add_skill_scores(model_dir: str | Path, skills_file: str | Path | None = None,
                     max_new_tokens: int = 64, csv: str | Path | None = None):
    """Score a model on the held-out skills (greedy,
    :func:`grpo_lib.tasks.skills.evaluate_skills`) and write the table to ``csv``
    (default ``<model_dir>/skills.csv``); when ``model_dir`` has a model card
    (``README.md``, from ``export``), add the table to it, replacing an earlier one.

    ``skills_file``: JSONL rows with ``skill``, ``question``, ``answer``; default
    ``data/skills/test.jsonl`` (the held-out wordings), and then the table gains a
    ``new_words`` column, the accuracy on ``data/skills/test_new_words.jsonl``
    (wordings with a word no training question uses). Returns the table (one row
    per skill: ``accuracy``, ``n`` [, ``new_words``])."""
    from .models import load_model_and_tokenizer
    from .sft import read_jsonl
    from .tasks.skills import SKILLS_DIR, evaluate_skills

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir} holds no model (no config.json): give "
                                f"an exported model folder or a checkpoint-<step>")
    new_words_file = SKILLS_DIR / "test_new_words.jsonl"
    with_new_words = skills_file is None and new_words_file.is_file()
    skills_file = Path(skills_file or SKILLS_DIR / "test.jsonl")
    rows = read_jsonl(skills_file, "skills_file")
    model, tokenizer = load_model_and_tokenizer(model_dir, device="cpu")
    table, _ = evaluate_skills(model, tokenizer, rows, max_new_tokens=max_new_tokens)
    files = f"`{_shown_path(skills_file)}`, the held-out wordings"
    if with_new_words:
        new_words, _ = evaluate_skills(model, tokenizer, read_jsonl(new_words_file),
                                       max_new_tokens=max_new_tokens)
        table["new_words"] = new_words["accuracy"]
        files += (f"; `new_words`: `{_shown_path(new_words_file)}`, wordings with a "
                  f"word no training question uses")
    csv = Path(csv or model_dir / "skills.csv")
    table.to_csv(csv)
    print(table.to_string())
    print(f"wrote {csv}")
    card = model_dir / "README.md"
    if card.is_file():
        text = card.read_text(encoding="utf-8").split(SKILLS_MARKER)[0].rstrip("\n")
        section = [SKILLS_MARKER, "", f"Non-reasoning skills (`grpo_lib.tasks.skills."
                   f"evaluate_skills`, {files}; greedy, at most {max_new_tokens} new "
                   f"tokens, rule-scored by `score_skill`, on the CPU):", "",
                   table.to_markdown(floatfmt=("", ".3f", ".0f", ".3f")), ""]
        card.write_text(text + "\n\n" + "\n".join(section), encoding="utf-8")
        print(f"added the skills to {card}")
    return table


def main(argv=None) -> None:
    """``python -m grpo_lib.model_cards add-skills DIR [--skills-file F] [--csv C]``."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m grpo_lib.model_cards")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("add-skills", help="score the held-out skills (and add them "
                                          "to the model card, if there is one)")
    p.add_argument("model_dir")
    p.add_argument("--skills-file", default=None,
                   help="JSONL skill rows (default data/skills/test.jsonl)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--csv", default=None,
                   help="where to write the table (default DIR/skills.csv)")
    args = parser.parse_args(argv)
    try:
        add_skill_scores(args.model_dir, args.skills_file, args.max_new_tokens,
                         args.csv)
    except (ValueError, OSError) as err:
        print(f"python -m grpo_lib.model_cards add-skills: error: {err}",
              file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
