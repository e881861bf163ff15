"""KL estimators against a reference policy (Schulman, "Approximating KL divergence", 2020).

Per token, with ``log_ratio = logp - ref_logp = log pi(x)/pi_ref(x)`` and ``x ~ pi``:

======  ==============================================  =================  ===============================
name    value                                            E_pi[value]        gradient when used *in the loss*
======  ==============================================  =================  ===============================
``k1``  ``log_ratio``                                    KL(pi || ref)      E[grad] = 0: no regularisation
``k2``  ``log_ratio**2 / 2``                             ~ KL (2nd order)   grad KL(pi || ref): unbiased
``k3``  ``exp(-log_ratio) + log_ratio - 1``  (>= 0)      KL(pi || ref)      grad KL(ref || pi): **biased**
======  ==============================================  =================  ===============================

So in the loss use ``k2`` for an unbiased gradient of the reverse KL; ``k3`` (GRPO's choice) has
an unbiased, low-variance *value* but its gradient is that of the forward KL, a biased gradient
of KL(pi || ref). In the reward (``kl_placement="reward"``) use ``k1`` or ``k3`` (unbiased values;
the penalty then acts through the advantage, not through autograd); ``k2`` there is a biased
value. Derivations: Tang & Munos 2025, "On a few pitfalls in KL divergence gradient estimation
for RL" (arXiv 2506.09477). ``kl_beta = 0`` turns the term off.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from parpo_core.names import NameRegistry


class KLFn(Protocol):
    def __call__(self, logp: Tensor, ref_logp: Tensor) -> Tensor: ...


KL: NameRegistry[KLFn] = NameRegistry("KL estimator")


@KL.register("k1")
def k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``log pi - log pi_ref``, elementwise (any shape). Unbiased value, zero expected gradient."""
    return logp - ref_logp


@KL.register("k2")
def k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``(log pi - log pi_ref)^2 / 2``, elementwise. Biased value, unbiased reverse-KL gradient."""
    return 0.5 * (logp - ref_logp).pow(2)


@KL.register("k3")
def k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``pi_ref/pi - log(pi_ref/pi) - 1``, elementwise, >= 0. Unbiased value; in the loss its gradient
    is that of KL(ref || pi), a biased gradient of KL(pi || ref)."""
    neg = ref_logp - logp
    return torch.exp(neg) - neg - 1.0


def kl_reward_penalty(
    logp: Tensor, ref_logp: Tensor, mask: Tensor, beta: float, estimator: str = "k1"
) -> Tensor:
    """Sequence-level KL penalty for ``kl_placement="reward"``: ``-beta * sum_t mask * k(logp, ref_logp)``.

    ``logp``, ``ref_logp``, ``mask``: ``[B, T]``; returns ``[B]``, detached (a reward, not a loss).
    Add it to the rewards before computing advantages, e.g. as component ``"task/kl"`` (then it is
    normalised in its group like every task component).
    """
    with torch.no_grad():
        kl = KL[estimator](logp, ref_logp) * mask
        return -beta * kl.sum(dim=-1)
