"""GSM8K (Cobbe et al. 2021): grade-school word problems, in the book's row layout.

The data lives on the Hugging Face hub (``openai/gsm8k``, config ``main``: 7,473
training and 1,319 test problems). Each solution ends with ``#### <number>``; a row
here keeps that number as ``answer`` (commas removed), so chapter 3's
``accuracy_reward`` scores completions against it, and its ``prompt`` is a chat with
the answer format in a system message (an instruction-tuned model, not a base model
pretrained on the format, is the policy)::

    python -m grpo_lib train --config configs/qwen25_gsm8k.yaml   # where a hub is

This machine, and a reader offline, cannot reach the hub: :func:`load_split` then says
so in one line instead of failing inside ``datasets``.
"""
from __future__ import annotations

HUB_NAME, HUB_CONFIG = "openai/gsm8k", "main"
SYSTEM_PROMPT = (
    "Solve the problem. Think step by step inside <think> </think>, then write only "
    "the final number inside <answer> </answer>.")
"""The answer format, as DeepSeek-R1-Zero's template words it, for a chat model."""


def final_answer(solution: str) -> str:
    """The number after ``####`` at the end of a GSM8K solution, without thousands
    separators: ``"... #### 1,234"`` -> ``"1234"``."""
    if not isinstance(solution, str):
        raise ValueError(f"a GSM8K solution is text, got {type(solution).__name__}")
    _, mark, value = solution.strip().rpartition("####")  # a regex, '####\s*(.+?)\s*$',
    value = value.strip()  # took quadratic time on a long run of spaces
    if not mark or not value or "\n" in value:
        raise ValueError(f"a GSM8K solution ends with '#### <answer>'; this one does "
                         f"not: {solution[-80:]!r}")
    return value.replace(",", "").replace("$", "").strip()


def gsm8k_row(row: dict) -> dict:
    """One hub row (``question``, ``answer`` = the worked solution) as a book row:
    ``question``, ``answer`` (the final number), ``solution`` and ``prompt``."""
    return {"question": row["question"], "answer": final_answer(row["answer"]),
            "solution": row["answer"],
            "prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                       {"role": "user", "content": row["question"]}]}


def load_split(split: str = "train"):
    """GSM8K's ``train`` or ``test`` split as a ``datasets.Dataset`` of book rows.

    Raises ``OSError`` with what to do when the hub cannot be reached (the dataset is
    not in the local ``datasets`` cache)."""
    import datasets

    from ..hub import hub_access

    if split not in ("train", "test"):
        raise ValueError(f"GSM8K has the splits 'train' and 'test', not {split!r}.")
    online = None
    try:
        with hub_access() as online:  # offline: the cache, or one error at once
            rows = datasets.load_dataset(HUB_NAME, HUB_CONFIG, split=split)
    except Exception as err:  # noqa: BLE001 -- connection, cache and hub errors alike
        where = "" if online else "The hub is out of reach from here. "
        raise OSError(
            f"GSM8K ({HUB_NAME}) could not be loaded: {type(err).__name__}: "
            f"{str(err)[:160]}. {where}It comes from the Hugging Face hub; on a "
            f"machine that reaches the hub it downloads once into the datasets cache, "
            f"which an offline machine can then use (HF_DATASETS_OFFLINE=1). The "
            f"book's own tasks (arithmetic, ...) need no hub.") from None
    return rows.map(gsm8k_row, remove_columns=rows.column_names)
