"""KL estimators against closed forms on a categorical distribution (exact expectations, no sampling)."""

from __future__ import annotations

import math

import pytest
import torch

from parpo.algorithms import KL, kl_reward_penalty

F64 = torch.float64
LN2 = math.log(2)
P = torch.tensor([0.5, 0.25, 0.25], dtype=F64)  # pi
Q = torch.tensor([0.25, 0.5, 0.25], dtype=F64)  # pi_ref


def expectation(name: str, p: torch.Tensor, q: torch.Tensor) -> float:
    """E_{x ~ p}[k(x)] computed exactly by summing over the three outcomes."""
    return float((p * KL[name](p.log(), q.log())).sum())


def test_values_against_closed_forms() -> None:
    # KL(p || q) = .5 ln(.5/.25) + .25 ln(.25/.5) + .25 ln 1 = .25 ln 2
    kl = 0.25 * LN2
    assert expectation("k1", P, Q) == pytest.approx(kl)
    # k3 outcomes: .5 - ln .5 - 1 = ln2 - .5; 2 - ln 2 - 1 = 1 - ln2; 0 -> .5(ln2 - .5) + .25(1 - ln2) = .25 ln2
    assert expectation("k3", P, Q) == pytest.approx(kl)
    # k2 = E[(ln p/q)^2] / 2 = (.5 (ln2)^2 + .25 (ln2)^2) / 2 = .375 (ln2)^2, biased (!= .25 ln 2)
    assert expectation("k2", P, Q) == pytest.approx(0.375 * LN2**2)
    assert expectation("k2", P, Q) != pytest.approx(kl)
    # k3 is non-negative per sample, k1 is not
    assert (KL["k3"](P.log(), Q.log()) >= 0).all() and (KL["k1"](P.log(), Q.log()) < 0).any()


def test_in_loss_gradients_k1_zero_k2_reverse_k3_forward() -> None:
    """Gradient of sum_x sg(pi(x)) k(x) (the loss with sampled tokens fixed) w.r.t. the logits."""
    logits = P.log().clone().requires_grad_(True)

    def grad_of(name: str) -> torch.Tensor:
        logp = torch.log_softmax(logits, 0)
        (g,) = torch.autograd.grad((logp.exp().detach() * KL[name](logp, Q.log())).sum(), logits)
        return g

    # d KL(p||q) / d logits = p * (ln p/q - KL) = [.5 * .75 ln2, .25 * -1.25 ln2, .25 * -.25 ln2]
    reverse = torch.tensor([0.375 * LN2, -0.3125 * LN2, -0.0625 * LN2], dtype=F64)
    # d KL(q||p) / d logits = p - q = [.25, -.25, 0]
    forward = torch.tensor([0.25, -0.25, 0.0], dtype=F64)
    assert torch.allclose(grad_of("k1"), torch.zeros(3, dtype=F64), atol=1e-12)
    assert torch.allclose(grad_of("k2"), reverse, atol=1e-12)
    assert torch.allclose(grad_of("k3"), forward, atol=1e-12)  # biased for KL(p || q)
    # the same two closed-form gradients by autograd
    logp = torch.log_softmax(logits, 0)
    (g_rev,) = torch.autograd.grad((logp.exp() * (logp - Q.log())).sum(), logits)
    (g_fwd,) = torch.autograd.grad((Q * (Q.log() - torch.log_softmax(logits, 0))).sum(), logits)
    assert torch.allclose(g_rev, reverse, atol=1e-12) and torch.allclose(g_fwd, forward, atol=1e-12)


def test_reward_penalty_is_minus_beta_masked_sum() -> None:
    logp = torch.tensor([[LN2, -LN2, 5.0]], dtype=F64, requires_grad=True)  # log-ratios, last token padded
    ref = torch.zeros(1, 3, dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=F64)
    pen = kl_reward_penalty(logp, ref, mask, beta=0.5)  # k1: ln2 - ln2 = 0
    assert pen.tolist() == pytest.approx([0.0]) and not pen.requires_grad
    pen3 = kl_reward_penalty(
        logp, ref, mask, beta=0.5, estimator="k3"
    )  # k3 sum = (ln2 - .5) + (1 - ln2) = .5
    assert pen3.tolist() == pytest.approx([-0.25])
