"""Chapter 7 checkers: correct solutions pass, wrong ones fail with a message."""
import pandas as pd
import pytest
import torch

from grpo_lib.exercises.ch07 import (check_first_step_above, check_grpo_loss,
                                     reference_first_step_above, reference_grpo_loss)


def torch_only_grpo_loss(logp, rewards, mask, G):
    r = rewards.view(-1, G)  # [num_groups, G]
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).view(-1, 1)
    ratio = torch.exp(logp - logp.detach())  # [B, C]
    per_token = -ratio * adv * mask  # [B, C]
    return (per_token.sum(1) / mask.sum(1)).mean()


def test_reference_grpo_loss_known_gradient():
    logp = torch.tensor([[-0.5, -1.0, 0.0], [-0.2, -0.3, -0.4]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    loss = reference_grpo_loss(logp, torch.tensor([1.0, 0.0]), mask, 2)
    loss.backward()
    assert abs(loss.item()) < 1e-6
    a = 0.5 / (0.5 ** 0.5 + 1e-4)  # A = (r - mean) / (sample std + eps)
    expected = torch.tensor([[-a / 4, -a / 4, 0.0], [a / 6, a / 6, a / 6]])
    assert torch.allclose(logp.grad, expected, atol=1e-6)


def test_check_grpo_loss_accepts_correct():
    assert check_grpo_loss(reference_grpo_loss)
    assert check_grpo_loss(torch_only_grpo_loss)


def test_check_grpo_loss_rejects_token_mean():
    def token_mean(logp, rewards, mask, G):  # bnpo-style: all tokens of the batch
        r = rewards.view(-1, G)
        adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4))
        ratio = torch.exp(logp - logp.detach())
        return (-ratio * adv.view(-1, 1) * mask).sum() / mask.sum()

    with pytest.raises(AssertionError, match="over all tokens"):
        check_grpo_loss(token_mean)


def test_check_grpo_loss_rejects_sign_and_detached():
    with pytest.raises(AssertionError, match="sign is flipped"):
        check_grpo_loss(lambda *a: -torch_only_grpo_loss(*a))
    with pytest.raises(AssertionError, match="no gradient"):
        check_grpo_loss(lambda logp, *a: torch_only_grpo_loss(logp.detach(), *a))


def test_reference_first_step_above():
    m = pd.DataFrame({"step": [1, 2, 3], "zero_std_frac": [0.5, 0.75, 1.0]})
    assert reference_first_step_above(m, "zero_std_frac", 0.5) == 2
    assert reference_first_step_above(m, "zero_std_frac", 1.0) is None


def test_check_first_step_above():
    assert check_first_step_above(reference_first_step_above)

    def row_index(m, column, threshold):
        above = m.index[m[column] > threshold]
        return None if len(above) == 0 else int(above[0])

    with pytest.raises(AssertionError, match="row index"):
        check_first_step_above(row_index)

    def greater_equal(m, column, threshold):
        above = m[m[column] >= threshold]
        return None if above.empty else int(above["step"].min())

    with pytest.raises(AssertionError, match="strictly greater"):
        check_first_step_above(greater_equal)

    def first_row(m, column, threshold):
        above = m[m[column] > threshold]
        return None if above.empty else int(above["step"].iloc[0])

    with pytest.raises(AssertionError, match="not sorted"):
        check_first_step_above(first_row)
