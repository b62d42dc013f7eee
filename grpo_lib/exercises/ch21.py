"""Checkers for chapter 21 (scaling out). Solutions: book/solutions/ch21.md."""
from __future__ import annotations

import json

from ..trainer import GRPOConfig
from ..trl_bridge import _split_over_processes
from ..verl_bridge import _LOSS_AGG, verl_row


# ------------------------------------------------------ 21.1 one step on N processes
def reference_split(per_step_prompts, num_generations, micro_batch_size,
                    num_processes) -> tuple[int, int]:
    """``(per_device_train_batch_size, gradient_accumulation_steps)`` from
    :func:`grpo_lib.trl_bridge._split_over_processes`; ``ValueError`` when a group
    would be cut between processes."""
    config = GRPOConfig(per_step_prompts=per_step_prompts,
                        num_generations=num_generations,
                        micro_batch_size=micro_batch_size)
    fields = _split_over_processes(config, num_processes)
    return (fields["per_device_train_batch_size"],
            fields["gradient_accumulation_steps"])


_SPLIT_CASES = [(16, 8, 64, 1), (16, 8, 64, 2), (16, 8, 64, 4), (16, 8, 32, 2),
                (16, 8, 8, 8), (4, 4, None, 2), (8, 16, 16, 2)]
_CUT_CASES = [(6, 4, 8, 4), (16, 8, 64, 3)]


def check_split(fn) -> bool:
    """Check ``fn(per_step_prompts, num_generations, micro_batch_size,
    num_processes) -> (per_device_train_batch_size, gradient_accumulation_steps)``."""
    for case in _SPLIT_CASES:
        expected = reference_split(*case)
        try:
            got = fn(*case)
        except NotImplementedError:  # the chapter's stub, not an answer
            raise
        except Exception as err:  # e.g. min(None, 4): None is the whole batch
            raise AssertionError(f"{case}: your function raised {type(err).__name__}: "
                                 f"{err} (micro_batch_size=None means the whole "
                                 f"batch).") from None
        try:
            got = tuple(int(v) for v in got)
        except (TypeError, ValueError):
            raise AssertionError(f"{case}: expected two numbers, got {got!r:.60}."
                                 ) from None
        if got == expected:
            continue
        P, G, m, n = case
        hint = ""
        if got == (m or P * G, P * G // (m or P * G)):
            hint = (" That is the one-process answer: TRL gives each process B / N "
                    "completions per step.")
        elif m and got[0] == m and m > P * G // n:
            hint = " A micro-batch cannot be larger than a process's share, B / N."
        raise AssertionError(f"(prompts, G, micro, processes) = {case}: expected "
                             f"{expected}, got {got}.{hint}")
    for case in _CUT_CASES:
        try:
            got = fn(*case)
        except ValueError:
            continue
        raise AssertionError(f"{case}: {case[0]} prompts cannot be split evenly over "
                             f"{case[3]} processes, so a group would be cut; raise "
                             f"ValueError (got {got!r}).")
    print("check_split: right for 1 to 8 processes, and refuses cut groups.")
    return True


# ----------------------------------------------------------------- 21.2 a verl row
_ROW = {"question": "2 + 3 * 4", "answer": "14",
        "prompt": [{"role": "user", "content": "What is 2 + 3 * 4?"}],
        "num_operands": 3}


def check_verl_row(fn) -> bool:
    """Check ``fn(row, task, split, index) -> dict`` against
    :func:`grpo_lib.verl_bridge.verl_row`."""
    for task, split, index in (("arithmetic", "train", 0),
                               ("arithmetic_zh", "test", 41)):
        expected = verl_row(_ROW, task, split, index)
        got = fn(dict(_ROW), task, split, index)
        if not isinstance(got, dict):
            raise AssertionError(f"expected a dict, got {got!r:.60}.")
        missing = sorted(set(expected) - set(got))
        if missing:
            raise AssertionError(f"the row lacks {missing}; verl reads the columns "
                                 f"{sorted(expected)}.")
        for key, want in expected.items():
            if json.dumps(got[key], sort_keys=True, default=str) != json.dumps(
                    want, sort_keys=True, default=str):
                hint = ""
                if key == "reward_model" and got[key] == _ROW["answer"]:
                    hint = (" verl reads the answer from "
                            "reward_model['ground_truth'], with style 'rule'.")
                raise AssertionError(f"{task}/{split} row {index}: {key} should be "
                                     f"{want!r}, got {got[key]!r}.{hint}")
    print("check_verl_row: all five columns as verl's gsm8k example writes them.")
    return True


# ---------------------------------------------------- 21.3 the same loss, another name
def check_loss_agg(fn) -> bool:
    """Check ``fn(loss_type) -> str`` for ``grpo``, ``dapo`` and ``dr_grpo``."""
    for loss_type in ("grpo", "dapo", "dr_grpo"):
        expected, got = _LOSS_AGG[loss_type], fn(loss_type)
        if got == expected:
            continue
        hint = {
            "grpo": " grpo averages each completion's tokens first, then the "
                    "completions.",
            "dapo": " dapo divides the sum over all tokens by their number.",
            "dr_grpo": " dr_grpo sums each completion's tokens and divides by a "
                       "constant (the maximum length), not by the completion's own "
                       "length.",
        }[loss_type]
        raise AssertionError(f"{loss_type}: expected {expected!r}, got {got!r}.{hint}")
    print("check_loss_agg: grpo, dapo and dr_grpo named as verl names them.")
    return True
