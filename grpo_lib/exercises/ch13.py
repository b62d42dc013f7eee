"""Checkers for chapter 13 (a learned reward model).
Solutions: book/solutions/ch13.md."""
from __future__ import annotations

import math

import torch

from ..reward_model import bradley_terry_loss
from ..rewards import accuracy_reward


def _number(got, what: str) -> float:
    if isinstance(got, torch.Tensor):
        if got.numel() != 1:
            raise AssertionError(f"{what}: expected one number, got a tensor of shape "
                                 f"{tuple(got.shape)}. Average over the pairs.")
        got = got.item()
    try:
        return float(got)
    except (TypeError, ValueError):
        raise AssertionError(f"{what}: expected a number, got {got!r:.60}.") from None


# ---------------------------------------------------------- 13.1 Bradley–Terry loss
_LOSS_CASES = [
    ("one pair ranked right", [2.0], [0.0]),
    ("one pair ranked wrong", [0.0], [2.0]),
    ("a tie", [1.5], [1.5]),
    ("three pairs", [0.3, -1.0, 4.0], [0.1, 0.5, -2.0]),
    ("a confident mistake", [-60.0, 0.0], [60.0, 0.0]),
    ("a very confident mistake", [-200.0], [0.0]),
]


def check_bt_loss(fn) -> bool:
    """Check ``fn(chosen, rejected) -> tensor``: the mean over pairs of
    ``-log sigmoid(chosen - rejected)``, finite for any finite scores."""
    for name, chosen, rejected in _LOSS_CASES:
        c, r = torch.tensor(chosen), torch.tensor(rejected)
        expected = bradley_terry_loss(c, r).item()
        got = _number(fn(c.clone(), r.clone()), name)
        if math.isclose(got, expected, rel_tol=1e-5, abs_tol=1e-6):
            continue
        hint = ""
        if not math.isfinite(got):
            hint = (" The sigmoid of a very negative margin rounds to 0 in float32 "
                    "and its log is -inf; compute log sigmoid in one step "
                    "(torch.nn.functional.logsigmoid).")
        elif math.isclose(got, -expected, rel_tol=1e-5):
            hint = (" The sign: a likelihood is maximised, so its negative log is "
                    "the loss.")
        elif len(chosen) > 1 and math.isclose(got, expected * len(chosen),
                                              rel_tol=1e-5):
            hint = " That is the sum over pairs; take the mean."
        raise AssertionError(f"{name}: chosen={chosen}, rejected={rejected}: expected "
                             f"{expected:.6g}, got {got:.6g}.{hint}")
    print("check_bt_loss: the mean negative log-likelihood on every case, finite for "
          "confident mistakes too.")
    return True


# ------------------------------------------------------------- 13.2 the ideal margin
def reference_ideal_margin(flip: float) -> float:
    r"""The score gap :math:`g = r(\text{better}) - r(\text{worse})` that
    Bradley–Terry fits when the judge prefers the better answer with probability
    :math:`1 - p`: :math:`\sigma(g) = 1 - p`, so :math:`g = \log\frac{1-p}{p}`
    (infinite for a judge who never errs, :math:`p = 0`)."""
    return math.inf if flip == 0 else math.log((1 - flip) / flip)


_MARGIN_CASES = [0.1, 0.25, 0.01, 0.4, 0.49, 0.0]


def check_ideal_margin(fn) -> bool:
    """Check ``fn(flip) -> float``: the score gap a perfect fit learns between a better
    and a worse answer when the judge errs on a share ``flip`` of the pairs."""
    for flip in _MARGIN_CASES:
        expected = reference_ideal_margin(flip)
        try:
            got = _number(fn(flip), f"flip={flip}")
        except (ZeroDivisionError, ValueError) as err:
            raise AssertionError(
                f"flip={flip}: your function raised {type(err).__name__}: {err}. A "
                f"judge who never errs leaves no finite best gap: return math.inf."
            ) from None
        if got == expected or math.isclose(got, expected, rel_tol=1e-6):
            continue
        hint = ""
        if math.isclose(got, 1 - flip, rel_tol=1e-6):
            hint = (" 1 - flip is the probability the better answer wins; the margin "
                    "is the score gap whose sigmoid equals it.")
        elif math.isclose(got, math.log(flip / (1 - flip)), rel_tol=1e-6):
            hint = " The better answer gets the higher score: check the sign."
        raise AssertionError(f"flip={flip}: expected {expected:.6g}, got "
                             f"{got!r}.{hint}")
    print("check_ideal_margin: log((1 - flip) / flip) on every case, infinite at 0.")
    return True


# ------------------------------------------------------- 13.3 a reward for all prompts
_ROUTE_ROWS = [
    ("arithmetic", "<think> 2 + 3 = 5 </think> <answer> 5 </answer>", "5"),
    ("chat", "I am a small assistant.", None),
    ("arithmetic", "<think> 2 * 3 = 5 </think> <answer> 5 </answer>", "6"),
    ("chat", "Hello!", None),
    ("arithmetic", "<think> 4 * 5 = 20 </think> <answer> 20 </answer>", "20"),
    ("arithmetic", "5", "5"),
]


class _RecordingModel:
    """A stand-in reward model: 0.5 + the text's length / 100; remembers its calls."""

    def __init__(self):
        self.calls = []

    def __call__(self, completions):
        self.calls.append(list(completions))
        return [0.5 + len(c) / 100 for c in completions]


def reference_all_scenarios_reward(completions, task, answer, reward_model):
    """The rule (:func:`grpo_lib.rewards.accuracy_reward`) on arithmetic prompts, the
    reward model on the others, each called once on its own rows."""
    out = [0.0] * len(completions)
    ruled = [i for i, t in enumerate(task) if t == "arithmetic"]
    other = [i for i, t in enumerate(task) if t != "arithmetic"]
    if ruled:
        scores = accuracy_reward([completions[i] for i in ruled],
                                 answer=[answer[i] for i in ruled])
        for i, s in zip(ruled, scores):
            out[i] = s
    if other:
        for i, s in zip(other, reward_model([completions[i] for i in other])):
            out[i] = s
    return out


def check_all_scenarios_reward(fn) -> bool:
    """Check ``fn(completions, task, answer, reward_model) -> list[float]``."""
    cases = [("mixed", _ROUTE_ROWS), ("arithmetic only", _ROUTE_ROWS[::2]),
             ("chat only", [r for r in _ROUTE_ROWS if r[0] == "chat"])]
    for name, rows in cases:
        task, completions, answer = (list(c) for c in zip(*rows))
        expected = reference_all_scenarios_reward(completions, task, answer,
                                                  _RecordingModel())
        model = _RecordingModel()
        got = fn(list(completions), list(task), list(answer), model)
        try:
            got = [float(v) for v in got]
        except (TypeError, ValueError):
            raise AssertionError(f"{name}: expected one number per completion, got "
                                 f"{got!r:.80}.") from None
        ruled_text = {c for t, c, _ in rows if t == "arithmetic"}
        if any(c in ruled_text for call in model.calls for c in call):
            raise AssertionError(f"{name}: the reward model was asked to score an "
                                 f"arithmetic answer. A rule checks those.")
        if len(model.calls) > 1:
            raise AssertionError(f"{name}: the reward model was called "
                                 f"{len(model.calls)} times; call it once on all the "
                                 f"rows it scores (a model scores a batch at once).")
        if len(got) != len(expected) or any(
                not math.isclose(a, b, abs_tol=1e-9) for a, b in zip(got, expected)):
            raise AssertionError(f"{name}: expected {expected}, got {got}. Each score "
                                 f"must stay at its completion's position.")
    print("check_all_scenarios_reward: rules for arithmetic, the model for the rest, "
          "in order.")
    return True
