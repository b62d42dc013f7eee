"""Checkers for chapter 18 (the TRL path). Solutions: book/solutions/ch18.md."""
from __future__ import annotations

import math

import torch

from ..losses import policy_loss
from ..rewards import accuracy_reward, format_reward
from ..trainer import GRPOConfig


# ------------------------------------------------------------ 18.1 a reward for TRL
def _trl_case():
    """What TRL passes a reward function for 2 prompts x G = 2 (conversational)."""
    texts = ["<think> 2 * 3 = 6 </think> <answer> 6 </answer>",
             "<think> 2 + 3 </think> <answer> 5 </answer>",
             "<answer> 9**9**9**9 </answer>",
             "<think> 4 - 1 = 3 </think> <answer> 3 </answer>"]
    prompts = [[{"role": "user", "content": "What is 2 * 3?"}]] * 2 + \
              [[{"role": "user", "content": "What is 4 - 1?"}]] * 2
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    completions[1] = [{"role": "assistant", "content": "Let me work it out."},
                      {"role": "assistant", "content": texts[1]}]  # the last one counts
    columns = dict(answer=["6", "6", "3", "3"], question=["2 * 3"] * 2 + ["4 - 1"] * 2,
                   completion_ids=[[1, 2, 3]] * 4)
    extras = dict(trainer_state=object(), log_extra=lambda *a: None,
                  log_metric=lambda *a: None)
    return texts, prompts, completions, columns, extras


def _names_its_arguments(completions, answer, question, completion_ids):
    """A reward that takes the dataset's columns by name and nothing else (no
    ``**kwargs``): 1.0 where the answer's digits appear in the completion."""
    return [float(a in c) for c, a in zip(completions, answer)]


def check_trl_reward(wrap) -> bool:
    """Check ``wrap(fn) -> reward_func``: ``reward_func(prompts=..., completions=...,
    **columns, trainer_state=..., ...)`` (TRL's call) must return what
    ``fn(texts, **columns)`` (our trainer's call) returns, for our accuracy and
    format rewards and for a reward that names its arguments (no ``**kwargs``).
    One completion holds two messages: the last is the answer."""
    texts, prompts, completions, columns, extras = _trl_case()
    for fn in (accuracy_reward, format_reward, _names_its_arguments):
        expected = [float(v) for v in fn(texts, **columns)]
        wrapped = wrap(fn)
        try:
            got = wrapped(prompts=prompts, completions=completions, **columns, **extras)
        except TypeError as err:
            raise AssertionError(
                f"{fn.__name__}: calling it TRL's way raised TypeError: {err}. TRL "
                f"passes trainer_state, log_extra and log_metric as keywords, and "
                f"TRL's prompts; a reward that names its arguments takes neither: "
                f"pass on only the dataset columns."
            ) from None
        except AttributeError as err:
            raise AssertionError(
                f"{fn.__name__}: {err}. TRL's completions are lists of messages "
                f"[{{'role': 'assistant', 'content': ...}}]: take the last message's "
                f"content.") from None
        if got is None or len(got) != len(texts):
            raise AssertionError(f"{fn.__name__}: expected {len(texts)} scores, got "
                                 f"{got!r:.80}.")
        got = [float(v) for v in got]
        if got != expected:
            raise AssertionError(f"{fn.__name__}: expected {expected}, got {got}. The "
                                 f"text of a completion is "
                                 f"completions[i][-1]['content'].")
    print("check_trl_reward: TRL's conversational call gives our trainer's scores "
          "for the accuracy and format rewards and for one that names its arguments.")
    return True


# ------------------------------------------------------ 18.2 one step in TRL's units
def reference_trl_batch(per_step_prompts: int, num_generations: int,
                        micro_batch_size: int, num_iterations: int,
                        max_steps: int) -> dict:
    """TRL's batch fields for one of our steps (:func:`grpo_lib.trl_bridge.
    to_trl_config`): B = prompts x G completions per rollout, B / micro micro-batches
    per optimizer step, μ optimizer steps per rollout."""
    from ..trl_bridge import TRL_FIELDS

    config = GRPOConfig(per_step_prompts=per_step_prompts,
                        num_generations=num_generations,
                        micro_batch_size=micro_batch_size,
                        num_iterations=num_iterations, max_steps=max_steps)
    names = ("generation_batch_size", "per_device_train_batch_size",
             "gradient_accumulation_steps", "max_steps")
    return {name: TRL_FIELDS[name].convert(config) for name in names}


_BATCH_CASES = [(16, 8, 64, 1, 150), (16, 8, 32, 1, 150), (4, 8, 8, 2, 100),
                (2, 4, 8, 4, 10), (8, 16, 128, 1, 40)]


def check_trl_batch(fn) -> bool:
    """Check ``fn(per_step_prompts, num_generations, micro_batch_size,
    num_iterations, max_steps) -> dict`` with the keys ``generation_batch_size``,
    ``per_device_train_batch_size``, ``gradient_accumulation_steps``, ``max_steps``."""
    for case in _BATCH_CASES:
        expected = reference_trl_batch(*case)
        got = fn(*case)
        if not isinstance(got, dict):
            raise AssertionError(f"{case}: expected a dict, got {got!r:.80}.")
        for key, want in expected.items():
            value = got.get(key)
            if value == want:
                continue
            P, G, m, mu, steps = case
            hint = ""
            if key == "gradient_accumulation_steps" and value == P // max(1, m):
                hint = " Count completions, not prompts: the batch is P x G rows."
            elif key == "max_steps" and value == steps:
                hint = (" TRL counts optimizer steps: each rollout is followed by "
                        "num_iterations of them.")
            elif key == "generation_batch_size" and value == P:
                hint = " TRL's generation batch counts completions: P x G."
            raise AssertionError(f"(prompts, G, micro, mu, steps) = {case}: {key} "
                                 f"should be {want}, got {value!r}.{hint}")
    print("check_trl_batch: rollout, micro-batch, accumulation and step count as "
          "TRL counts them, in all five cases.")
    return True


# ---------------------------------------------------- 18.3 the loss TRL logs on-policy
def reference_onpolicy_loss(advantages, lengths, loss_type: str) -> float:
    """The value of the clipped loss at the first update of a step (ratio 1):
    ``policy_loss`` with the current log-probs equal to the old ones."""
    adv = torch.tensor(advantages, dtype=torch.float64)  # [B]
    lengths = torch.tensor(lengths)
    width = int(lengths.max())
    mask = (torch.arange(width)[None, :] < lengths[:, None]).double()  # [B, T]
    logp = torch.zeros_like(mask)
    loss, _ = policy_loss(logp, logp, adv, mask, loss_type=loss_type,
                          max_completion_length=width)
    return float(loss)


_LOSS_CASES = [
    ([1.0, -1.0], [10, 10]),
    ([1.0, -1.0], [40, 10]),
    ([1.0, 0.5], [10, 30]),  # advantages that do not sum to 0
    ([0.87, 0.87, -0.87, -0.87], [12, 30, 25, 60]),
    ([1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0], [8, 20, 20, 21, 50, 5, 9, 33]),
]


def check_onpolicy_loss(fn) -> bool:
    """Check ``fn(advantages, lengths, loss_type) -> float`` for ``"grpo"`` and
    ``"dapo"``: the loss TRL logs when the policy has not moved yet (ratio 1)."""
    for advantages, lengths in _LOSS_CASES:
        for loss_type in ("grpo", "dapo"):
            expected = reference_onpolicy_loss(advantages, lengths, loss_type)
            got = fn(list(advantages), list(lengths), loss_type)
            try:
                got = float(got)
            except (TypeError, ValueError):
                raise AssertionError(f"{loss_type}, {advantages}, {lengths}: "
                                     f"expected a number, got {got!r}.") from None
            if math.isclose(got, expected, abs_tol=1e-9):
                continue
            hint = ""
            if math.isclose(got, -expected, abs_tol=1e-9):
                hint = (" Check the sign: the loss is minus the advantage-weighted "
                        "ratio, so a positive advantage makes it negative.")
            elif loss_type == "grpo":
                hint = (" With 'grpo' each completion's tokens are averaged first: its "
                        "length cancels and only the mean advantage is left.")
            elif loss_type == "dapo":
                hint = (" With 'dapo' every token counts once: divide the sum of "
                        "A_i x |o_i| by the number of tokens in the whole batch.")
            raise AssertionError(f"{loss_type}, advantages {advantages}, lengths "
                                 f"{lengths}: expected {expected:.6f}, got "
                                 f"{got:.6f}.{hint}")
    print(f"check_onpolicy_loss: 'grpo' and 'dapo' on-policy losses right in all "
          f"{len(_LOSS_CASES)} batches.")
    return True
