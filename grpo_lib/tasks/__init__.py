"""Tasks: problem generators, splits and prompts. ``load_task_split(task, split)``."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

# task name -> the language its questions are asked in
TASKS = {"arithmetic": "en", "arithmetic_zh": "zh", "arithmetic_bilingual": "en+zh"}


def write_jsonl(rows: Iterable[dict], path: str | Path) -> Path:
    """Write ``rows`` as JSONL (one object per line, UTF-8, non-ASCII text as is),
    creating the folder; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    path.write_text(text, encoding="utf-8")
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    """The JSON objects of the file at ``path``, one per non-blank line. A line that
    is not one (a file cut short, edited by hand) is a ``ValueError`` naming the file,
    the line and how to make the file again."""
    rows = []
    for number, line in enumerate(Path(path).read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            row = err
        if not isinstance(row, dict):
            raise ValueError(f"{path} line {number} is not a JSON object ({row}); "
                             f"remake it (data/README.md has the book's commands).")
        rows.append(row)
    return rows


def load_task_split(task: str = "arithmetic", split: str = "train"):
    """A task's split as a ``datasets.Dataset`` (columns: question, answer, prompt,
    ...). ``arithmetic_zh`` asks the same problems in Chinese, ``arithmetic_bilingual``
    every odd one; ``gsm8k`` comes from the Hugging Face hub."""
    if task in TASKS:
        from .arithmetic import load_split

        return load_split(split, language=TASKS[task])
    if task == "countdown":  # GRPO-Zero's task (tasks/countdown.py)
        from .countdown import load_split as load_countdown

        return load_countdown(split)
    if task == "gsm8k":  # from the Hugging Face hub (tasks/gsm8k.py)
        from .gsm8k import load_split as load_gsm8k

        return load_gsm8k(split)
    raise ValueError(f"unknown task {task!r}; available: {', '.join(TASKS)}, "
                     f"countdown, gsm8k")
