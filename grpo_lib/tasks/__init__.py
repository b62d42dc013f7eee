"""Tasks: problem generators, splits and prompts. ``load_task_split(task, split)``."""
from __future__ import annotations

TASKS = ("arithmetic",)


def load_task_split(task: str = "arithmetic", split: str = "train"):
    """A task's split as a ``datasets.Dataset`` (columns: question, answer, prompt,
    ...)."""
    if task == "arithmetic":
        from .arithmetic import load_split

        return load_split(split)
    raise ValueError(f"unknown task {task!r}; available: {TASKS}")
