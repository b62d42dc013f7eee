"""Tests for grpo_lib.objective: ratio, clipping on both sides, k1/k2/k3, TRL parity."""
import math

import pytest
import torch

from grpo_lib.objective import (clipped_surrogate, clipped_tokens, kl_estimate,
                                probability_ratio, sync_reference)


def test_probability_ratio_values_and_gradient():
    logp = torch.tensor([[math.log(0.5), math.log(0.2)]], requires_grad=True)
    old = torch.tensor([[math.log(0.25), math.log(0.2)]], requires_grad=True)
    ratio = probability_ratio(logp, old)
    torch.testing.assert_close(ratio, torch.tensor([[2.0, 1.0]]))
    ratio.sum().backward()
    # d rho / d logp = rho; old_logp is a constant (detached)
    torch.testing.assert_close(logp.grad, torch.tensor([[2.0, 1.0]]))
    assert old.grad is None


def test_probability_ratio_shape_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        probability_ratio(torch.zeros(2, 3), torch.zeros(2, 4))


RATIOS = torch.tensor([[0.5, 0.8, 1.0, 1.1, 1.2, 1.5]])


def test_clip_positive_advantage():
    # A = +2: min(rho A, clip(rho) A) -> rho*A below 1.2, capped at 1.2*A above.
    out = clipped_surrogate(RATIOS, torch.tensor([2.0]), epsilon=0.2)
    torch.testing.assert_close(out, torch.tensor([[1.0, 1.6, 2.0, 2.2, 2.4, 2.4]]))


def test_clip_negative_advantage():
    # A = -1: capped at -(0.8) below 0.8, unclipped (more negative) above 1.2.
    out = clipped_surrogate(RATIOS, torch.tensor([-1.0]), epsilon=0.2)
    torch.testing.assert_close(out, torch.tensor([[-0.8, -0.8, -1.0, -1.1, -1.2, -1.5]]))


def test_clip_gradients_vanish_only_on_the_clipped_side():
    ratio = RATIOS.clone().requires_grad_(True)
    clipped_surrogate(ratio, torch.tensor([1.0])).sum().backward()
    assert ratio.grad.tolist() == [[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]]
    ratio = RATIOS.clone().requires_grad_(True)
    clipped_surrogate(ratio, torch.tensor([-1.0])).sum().backward()
    assert ratio.grad.tolist() == [[0.0, -1.0, -1.0, -1.0, -1.0, -1.0]]


def test_clip_higher_asymmetric():
    out = clipped_surrogate(RATIOS, torch.tensor([1.0]), epsilon=0.2, epsilon_high=0.28)
    torch.testing.assert_close(out, torch.tensor([[0.5, 0.8, 1.0, 1.1, 1.2, 1.28]]))
    low, high = clipped_tokens(RATIOS, torch.tensor([1.0]), 0.2, 0.28)
    assert high.tolist() == [[False] * 5 + [True]] and not low.any()
    low, high = clipped_tokens(RATIOS, torch.tensor([-1.0]), 0.2, 0.28)
    assert low.tolist() == [[True] + [False] * 5] and not high.any()


def test_advantage_broadcast_per_sequence_and_per_token():
    ratio = torch.ones(2, 3)
    per_seq = clipped_surrogate(ratio, torch.tensor([1.0, -2.0]))
    torch.testing.assert_close(per_seq, torch.tensor([[1.0] * 3, [-2.0] * 3]))
    per_tok = clipped_surrogate(ratio, torch.arange(6.0).view(2, 3))
    torch.testing.assert_close(per_tok, torch.arange(6.0).view(2, 3))
    with pytest.raises(ValueError, match="do not fit"):
        clipped_surrogate(ratio, torch.ones(3))
    with pytest.raises(ValueError, match="clip ranges"):
        clipped_surrogate(ratio, torch.ones(2), epsilon=1.5)


def test_kl_estimators_known_values():
    # pi_theta(x) = 0.5, pi_ref(x) = 0.25 -> r = 0.5, log r = -log 2
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    l2 = math.log(2)
    assert kl_estimate(logp, ref, "k1").item() == pytest.approx(l2, abs=1e-6)
    assert kl_estimate(logp, ref, "k2").item() == pytest.approx(0.5 * l2 ** 2, abs=1e-6)
    assert kl_estimate(logp, ref, "k3").item() == pytest.approx(0.5 - 1 + l2, abs=1e-6)
    # reversed roles: r = 2 -> k1 negative, k3 = 1 - log 2 >= 0
    assert kl_estimate(ref, logp, "k1").item() == pytest.approx(-l2, abs=1e-6)
    assert kl_estimate(ref, logp, "k3").item() == pytest.approx(1 - l2, abs=1e-6)
    same = torch.randn(3, 4)
    for kind in ("k1", "k2", "k3"):
        assert torch.equal(kl_estimate(same, same, kind), torch.zeros(3, 4))
    with pytest.raises(ValueError, match="kind='k4'"):
        kl_estimate(same, same, "k4")


def _categoricals():
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(6, generator=g, dtype=torch.float64, requires_grad=True)
    ref_logp = torch.log_softmax(torch.randn(6, generator=g, dtype=torch.float64), 0)
    return theta, ref_logp


def test_k1_k3_unbiased_k2_biased_exact_expectations():
    theta, ref_logp = _categoricals()
    logp = torch.log_softmax(theta, 0).detach()
    p = logp.exp()
    kl = (p * (logp - ref_logp)).sum()
    e = {k: (p * kl_estimate(logp, ref_logp, k)).sum() for k in ("k1", "k2", "k3")}
    torch.testing.assert_close(e["k1"], kl)
    torch.testing.assert_close(e["k3"], kl)
    assert abs(e["k2"].item() - kl.item()) > 1e-3  # biased


def test_loss_gradients_of_the_estimators():
    """Expected gradient of E_{x~pi}[k(x)] with the sample weights held fixed."""
    theta, ref_logp = _categoricals()

    def grad_of(fn):
        (g,) = torch.autograd.grad(fn(), theta)
        return g

    def on_policy_loss(kind):
        logp = torch.log_softmax(theta, 0)
        return (logp.exp().detach() * kl_estimate(logp, ref_logp, kind)).sum()

    def reverse_kl():
        logp = torch.log_softmax(theta, 0)
        return (logp.exp() * (logp - ref_logp)).sum()

    def forward_kl():
        logp = torch.log_softmax(theta, 0)
        return (ref_logp.exp() * (ref_logp - logp)).sum()

    g1, g2, g3 = (grad_of(lambda k=k: on_policy_loss(k)) for k in ("k1", "k2", "k3"))
    torch.testing.assert_close(g1, torch.zeros_like(g1), atol=1e-12, rtol=0)
    torch.testing.assert_close(g2, grad_of(reverse_kl))
    torch.testing.assert_close(g3, grad_of(forward_kl))
    assert (g3 - grad_of(reverse_kl)).abs().max() > 1e-3

    def ratio_weighted_k3():  # TRL's use_bias_correction_kl: rho * k3, rho = 1 on-policy
        logp = torch.log_softmax(theta, 0)
        rho = probability_ratio(logp, logp.detach())
        return (logp.exp().detach() * rho * kl_estimate(logp, ref_logp, "k3")).sum()

    torch.testing.assert_close(grad_of(ratio_weighted_k3), grad_of(reverse_kl))


def test_k3_parity_with_trl_grpo_trainer():
    """TRL 1.16 trl/trainer/grpo_trainer.py (GRPOTrainer._compute_loss, ~line 3100):
    per_token_kl = exp(ref - logp) - (ref - logp) - 1. TRL has no standalone function
    for it, so the expression is taken from that line and checked against its source."""
    import inspect

    from trl.trainer import grpo_trainer

    src = inspect.getsource(grpo_trainer)
    assert ("torch.exp(ref_per_token_logps - per_token_logps) - "
            "(ref_per_token_logps - per_token_logps) - 1") in src
    g = torch.Generator().manual_seed(1)
    per_token_logps = -torch.rand(4, 7, generator=g) * 5
    ref_per_token_logps = -torch.rand(4, 7, generator=g) * 5
    trl_kl = (torch.exp(ref_per_token_logps - per_token_logps)
              - (ref_per_token_logps - per_token_logps) - 1)
    torch.testing.assert_close(kl_estimate(per_token_logps, ref_per_token_logps, "k3"),
                               trl_kl, atol=0, rtol=0)


def test_chapter2_checkers_accept_the_library_and_reject_common_mistakes():
    from grpo_lib.exercises.ch02 import (check_clipped_surrogate, check_grpo_objective,
                                         check_k3)

    assert check_clipped_surrogate(lambda r, a, e: clipped_surrogate(r, a, e))
    with pytest.raises(AssertionError, match="You took the max"):
        check_clipped_surrogate(lambda r, a, e: torch.maximum(
            r * a[:, None], r.clamp(1 - e, 1 + e) * a[:, None]))
    assert check_k3(lambda lp, ref: kl_estimate(lp, ref, "k3"))
    with pytest.raises(AssertionError, match="roles swapped"):
        check_k3(lambda lp, ref: kl_estimate(ref, lp, "k3"))

    def objective(logp, old, ref, adv, mask, eps, beta):
        per_token = (clipped_surrogate(probability_ratio(logp, old), adv, eps)
                     - beta * kl_estimate(logp, ref, "k3"))
        return ((per_token * mask).sum(-1) / mask.sum(-1)).mean()

    assert check_grpo_objective(objective)
    with pytest.raises(AssertionError, match="sign is flipped"):
        check_grpo_objective(lambda *args: -objective(*args))

    def token_mean(logp, old, ref, adv, mask, eps, beta):
        per_token = (clipped_surrogate(probability_ratio(logp, old), adv, eps)
                     - beta * kl_estimate(logp, ref, "k3"))
        return (per_token * mask).sum() / mask.sum()

    with pytest.raises(AssertionError, match="BNPO/DAPO"):
        check_grpo_objective(token_mean)


def test_sequence_ratio_asks_for_one_advantage_per_sequence():
    """A ratio of shape [B, 1] (GSPO's, one per completion) cannot take per-token
    advantages, and the message does not offer [B, 1] as a per-token shape."""
    ratio = torch.ones(2, 1)
    with pytest.raises(ValueError, match=r"per sequence \(\[B\] = \(2,\)\)\.$"):
        clipped_surrogate(ratio, torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"or one per token \(\(2, 3\)\)"):
        clipped_surrogate(torch.ones(2, 3), torch.ones(3, 3))


@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_sync_reference_is_trls_sync_callback(alpha):
    """Our TR-DPO step against TRL's own ``SyncRefModelCallback`` on the same pair."""
    pytest.importorskip("trl")
    from trl.trainer.callbacks import SyncRefModelCallback

    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    ref_ours = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    ref_trl = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    ref_trl.load_state_dict(ref_ours.state_dict())
    before = [p.clone() for p in ref_ours.parameters()]
    sync_reference(policy, ref_ours, alpha)
    SyncRefModelCallback._sync_target_model(policy, ref_trl, alpha)
    for ours, theirs, old, theta in zip(ref_ours.parameters(), ref_trl.parameters(),
                                        before, policy.parameters()):
        assert torch.equal(ours, theirs)
        assert torch.allclose(ours, alpha * theta + (1 - alpha) * old)


def test_sync_reference_refuses_a_model_of_another_shape():
    with pytest.raises(ValueError, match="different parameters"):
        sync_reference(torch.nn.Linear(4, 3), torch.nn.Linear(4, 2), 0.5)

