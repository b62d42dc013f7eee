"""Chapter 18 checkers: they accept the solutions of book/solutions/ch18.md, reject
typical mistakes with a message that says what is wrong, and their references agree
with values worked by hand and with the bridge TRL actually runs."""
import pytest

from grpo_lib.exercises.ch18 import (check_onpolicy_loss, check_trl_batch,
                                     check_trl_reward, reference_onpolicy_loss,
                                     reference_trl_batch)

TRL_EXTRAS = ("trainer_state", "log_extra", "log_metric")


# ---------------------------------------------------------------- solutions (ch18.md)
def solution_wrap(fn):
    def reward_func(completions, prompts=None, **kwargs):
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        columns = {k: v for k, v in kwargs.items() if k not in TRL_EXTRAS}
        return fn(texts, **columns)
    return reward_func


def solution_trl_batch(per_step_prompts, num_generations, micro_batch_size,
                       num_iterations, max_steps):
    B = per_step_prompts * num_generations
    return dict(generation_batch_size=B, per_device_train_batch_size=micro_batch_size,
                gradient_accumulation_steps=B // micro_batch_size,
                max_steps=max_steps * num_iterations)


def solution_onpolicy_loss(advantages, lengths, loss_type):
    if loss_type == "grpo":  # mean over tokens, then over completions
        return -sum(advantages) / len(advantages)
    return -sum(a * n for a, n in zip(advantages, lengths)) / sum(lengths)


def test_checkers_accept_the_solutions():
    assert check_trl_reward(solution_wrap) is True
    assert check_trl_batch(solution_trl_batch) is True
    assert check_onpolicy_loss(solution_onpolicy_loss) is True


# ---------------------------------------------------------------- wrong attempts
def test_reward_wrapper_mistakes_are_named():
    def constant(fn):
        return lambda completions, **kw: [0.0] * len(completions)

    def positional_prompts(fn):  # our rewards take the completions only
        return lambda completions, prompts=None, **kw: fn(
            [c[-1]["content"] for c in completions], prompts, **kw)

    with pytest.raises(AssertionError, match=r"expected \["):
        check_trl_reward(constant)
    with pytest.raises(AssertionError, match="TypeError"):
        check_trl_reward(positional_prompts)


def test_reward_wrapper_that_forgets_the_messages_is_named():
    def wrap(fn):
        return lambda completions, **kw: fn([c.strip() for c in completions], **kw)

    with pytest.raises(AssertionError, match="last message's"):
        check_trl_reward(wrap)


def test_batch_mistakes_are_named():
    def per_prompt(P, G, m, mu, steps):
        return dict(solution_trl_batch(P, G, m, mu, steps),
                    gradient_accumulation_steps=P // m)

    def no_mu(P, G, m, mu, steps):
        return dict(solution_trl_batch(P, G, m, mu, steps), max_steps=steps)

    with pytest.raises(AssertionError, match="Count completions"):
        check_trl_batch(per_prompt)
    with pytest.raises(AssertionError, match="optimizer steps"):
        check_trl_batch(no_mu)


def test_loss_mistakes_are_named():
    def flipped(a, n, t):
        return -solution_onpolicy_loss(a, n, t)

    def dapo_as_grpo(a, n, t):
        return solution_onpolicy_loss(a, n, "grpo")

    def grpo_as_dapo(a, n, t):
        return solution_onpolicy_loss(a, n, "dapo")

    with pytest.raises(AssertionError, match="sign"):
        check_onpolicy_loss(flipped)
    with pytest.raises(AssertionError, match="every token counts once"):
        check_onpolicy_loss(dapo_as_grpo)
    with pytest.raises(AssertionError, match="length cancels"):
        check_onpolicy_loss(grpo_as_dapo)


# ---------------------------------------------------------------- references
def test_onpolicy_loss_by_hand():
    # A = (+1, -1), lengths (40, 10): grpo -(1 - 1)/2 = 0; dapo -(40 - 10)/50 = -0.6
    assert reference_onpolicy_loss([1.0, -1.0], [40, 10], "grpo") == pytest.approx(0)
    assert reference_onpolicy_loss([1.0, -1.0], [40, 10], "dapo") == pytest.approx(-0.6)


def test_batch_reference_is_what_the_bridge_gives_trl(tmp_path):
    from grpo_lib.trainer import GRPOConfig
    from grpo_lib.trl_bridge import to_trl_config

    pytest.importorskip("trl")
    config = GRPOConfig(per_step_prompts=4, num_generations=8, micro_batch_size=8,
                        num_iterations=2, max_steps=100, output_dir=str(tmp_path))
    trl_config = to_trl_config(config)
    for key, value in reference_trl_batch(4, 8, 8, 2, 100).items():
        assert getattr(trl_config, key) == value, key
    assert reference_trl_batch(4, 8, 8, 2, 100) == dict(
        generation_batch_size=32, per_device_train_batch_size=8,
        gradient_accumulation_steps=4, max_steps=200)
