"""Shared by the trainer tests of the fast path (tests/test_fast_decode.py,
test_shared_prompt.py, test_sampling_correction.py, test_optim.py): four arithmetic
rows in the chat format and a cheap reward with variance in every group."""
from __future__ import annotations

ROWS = [{"question": q, "answer": a,
         "prompt": [{"role": "user", "content": f"What is {q}?"}]}
        for q, a in [("2 + 3", "5"), ("14 * 2", "28"), ("7 - 1", "6"), ("6 - 2", "4")]]


def digit_share(completions, **kwargs):
    """Share of digit characters in each completion (0 for an empty one)."""
    return [sum(ch.isdigit() for ch in t) / max(1, len(t)) for t in completions]
