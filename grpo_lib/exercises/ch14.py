"""Checkers for chapter 14 (distillation).
Solutions: book/solutions/ch14.md."""
from __future__ import annotations

import torch

from ..distill import token_kl


def _tensor(got, what: str, shape: tuple) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{what}: expected a tensor, got {type(got).__name__}.")
    if tuple(got.shape) != shape:
        raise AssertionError(f"{what}: expected shape {shape}, got "
                             f"{tuple(got.shape)}.")
    return got.detach().float()


def _logit_cases():
    torch.manual_seed(14)
    yield "one position, 3 tokens", torch.tensor([[1.0, 0.0, -1.0]]), torch.tensor(
        [[0.0, 2.0, 0.0]])
    yield "the same distribution", torch.tensor([[0.5, 1.5, -2.0]]), torch.tensor(
        [[0.5, 1.5, -2.0]])
    yield "a batch [2, 4, 6]", torch.randn(2, 4, 6), torch.randn(2, 4, 6)
    yield "logits shifted by a constant", torch.tensor([[3.0, 1.0]]) + 100, \
        torch.tensor([[1.0, 3.0]])
    yield "a token the student gives ~0", torch.tensor([[0.0, -120.0, 0.0]]), \
        torch.tensor([[0.0, 0.0, 0.0]])
    yield "a token neither gives mass", torch.tensor([[0.0, -200.0, 1.0]]), \
        torch.tensor([[1.0, -200.0, 0.0]])


# ------------------------------------------------------------------ 14.1 token KL
def check_token_kl(fn) -> bool:
    """Check ``fn(student_logits, teacher_logits) -> tensor [...]``: the forward KL
    ``sum_v p_T(v) (log p_T(v) - log p_S(v))`` at each position, finite always."""
    for name, s, t in _logit_cases():
        expected = token_kl(s, t)
        got = _tensor(fn(s.clone(), t.clone()), name, tuple(expected.shape))
        if torch.allclose(got, expected, atol=1e-5, rtol=1e-5):
            continue
        hint = ""
        if not torch.isfinite(got).all():
            hint = (" log(softmax(z)) of a very negative logit is log 0 = -inf, and "
                    "0 x -inf is nan: take log_softmax in one step.")
        elif torch.allclose(got, token_kl(s, t, "reverse"), atol=1e-5):
            hint = (" That is KL(p_S || p_T): the teacher's distribution weighs the "
                    "log-ratio in the forward KL.")
        elif torch.allclose(got, -expected, atol=1e-5):
            hint = " The sign: log p_T - log p_S, weighted by p_T."
        raise AssertionError(f"{name}: expected {expected.flatten()[:4].tolist()}, "
                             f"got {got.flatten()[:4].tolist()}.{hint}")
    print("check_token_kl: KL(p_T || p_S) at every position, finite for extreme "
          "logits.")
    return True


# ---------------------------------------------------------- 14.2 the KD gradient
def reference_kd_gradient(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                          tau: float) -> torch.Tensor:
    r"""The gradient of :math:`\tau^2 \mathbb D_{\mathrm{KL}}(p_T^\tau \Vert
    p_S^\tau)` in the student's logits: :math:`\tau (p_S^\tau - p_T^\tau)`."""
    p_s = (student_logits / tau).softmax(-1)  # [..., V]
    return tau * (p_s - (teacher_logits / tau).softmax(-1))


def check_kd_gradient(fn) -> bool:
    """Check ``fn(student_logits, teacher_logits, tau) -> tensor [..., V]``: the
    gradient of ``tau**2 * token_kl(s, t, temperature=tau)`` in ``s``, by formula."""
    cases = [(name, s, t, tau) for (name, s, t) in list(_logit_cases())[:4]
             for tau in (1.0, 2.0, 5.0)]
    for name, s, t, tau in cases:
        leaf = s.clone().requires_grad_(True)
        (tau ** 2 * token_kl(leaf, t, temperature=tau)).sum().backward()
        expected = leaf.grad
        got = _tensor(fn(s.clone(), t.clone(), tau), f"{name}, tau={tau}",
                      tuple(expected.shape))
        if torch.allclose(got, expected, atol=1e-5, rtol=1e-4):
            continue
        hint = ""
        if torch.allclose(got * tau, expected, atol=1e-5, rtol=1e-4):
            hint = (" Short by a factor tau: the chain rule through z / tau gives "
                    "1 / tau, the tau^2 in front gives tau^2.")
        elif torch.allclose(got, expected * tau, atol=1e-5, rtol=1e-4):
            hint = " A factor tau too many: d(z / tau) / dz = 1 / tau."
        elif torch.allclose(got, -expected, atol=1e-5, rtol=1e-4):
            hint = " The sign: the KL falls when p_S moves toward p_T."
        raise AssertionError(f"{name}, tau={tau}: expected "
                             f"{expected.flatten()[:4].tolist()}, got "
                             f"{got.flatten()[:4].tolist()}.{hint}")
    print("check_kd_gradient: tau (p_S - p_T) at every temperature, as autograd finds "
          "it.")
    return True


# --------------------------------------------------------------- 14.3 top-k KL
def reference_topk_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      k: int) -> torch.Tensor:
    r"""The KL from a teacher of whom only the ``k`` likeliest tokens are kept:
    :math:`\sum_{v \in \text{top-}k} \tilde p_T(v) (\log \tilde p_T(v) - \log p_S(v))`
    with :math:`\tilde p_T` the teacher's top-``k`` probabilities renormalised to 1
    and :math:`p_S` the student's full softmax."""
    log_s = student_logits.float().log_softmax(-1)  # [..., V]
    top_logits, top_ids = teacher_logits.float().topk(k, dim=-1)  # [..., k]
    log_t = top_logits.log_softmax(-1)  # renormalised over the k kept tokens
    return (log_t.exp() * (log_t - log_s.gather(-1, top_ids))).sum(-1)


def check_topk_kl(fn) -> bool:
    """Check ``fn(student_logits, teacher_logits, k) -> tensor [...]``."""
    torch.manual_seed(3)
    s, t = torch.randn(2, 3, 10), torch.randn(2, 3, 10) * 2
    for k in (10, 1, 3, 7):
        expected = reference_topk_kl(s, t, k)
        got = _tensor(fn(s.clone(), t.clone(), k), f"k={k}", tuple(expected.shape))
        if torch.allclose(got, expected, atol=1e-5, rtol=1e-5):
            continue
        hint = ""
        if k == 10:
            hint = " With k = V every token is kept: it must equal the full KL."
        else:
            raw = t.topk(k, dim=-1)
            p_raw = t.softmax(-1).gather(-1, raw.indices)  # not renormalised
            log_s = s.log_softmax(-1).gather(-1, raw.indices)
            unnorm = (p_raw * (p_raw.log() - log_s)).sum(-1)
            if torch.allclose(got, unnorm, atol=1e-5):
                hint = (" The teacher's k probabilities must be renormalised to sum "
                        "to 1: the stored top-k is all the teacher there is.")
            else:
                renorm_s = (s.gather(-1, raw.indices)).log_softmax(-1)
                p_t = raw.values.softmax(-1)
                both = (p_t * (p_t.log() - renorm_s)).sum(-1)
                if torch.allclose(got, both, atol=1e-5):
                    hint = (" Only the teacher is cut to its top k; the student's "
                            "log-probabilities come from its full softmax, so mass "
                            "it puts elsewhere still costs it.")
        raise AssertionError(f"k={k}: expected {expected.flatten()[:3].tolist()}, got "
                             f"{got.flatten()[:3].tolist()}.{hint}")
    print("check_topk_kl: the teacher's top k renormalised, the student's full "
          "log-probabilities; k = V is the full KL.")
    return True
