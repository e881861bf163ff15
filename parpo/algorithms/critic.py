"""Critic (value head) losses, registered by name in ``CRITIC_LOSSES``, and PACT's importance weights.

Signature::

    loss(pred: Tensor[B, T], target: Tensor[B, T], mask: Tensor[B, T], *,
         weights: Tensor[B, T] | None = None, n_tokens) -> (loss: scalar Tensor, metrics: dict[str, float])

``pred`` is the critic's raw output (the value for ``mse``, a logit ``v`` with value ``sigmoid(v)``
for ``bce``); ``target`` the returns of ``VALUE_ESTIMATORS`` and ``mask`` their ``value_mask``;
``weights`` optional per-token weights (detached). The loss is ``sum(mask * w * l) / n_tokens``
with ``n_tokens`` the global count of masked tokens, so micro-batch losses add up (as in
``aggregation.py``).
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from parpo.algorithms.aggregation import Count
from parpo_core.names import NameRegistry

# exp() of a summed log-ratio beyond this is an overflow, not a signal (as in losses.py).
_LOG_RATIO_CLAMP = 20.0


class CriticLossFn(Protocol):
    def __call__(
        self, pred: Tensor, target: Tensor, mask: Tensor, *, weights: Tensor | None = None, n_tokens: Count
    ) -> tuple[Tensor, dict[str, float]]: ...


CRITIC_LOSSES: NameRegistry[CriticLossFn] = NameRegistry("critic loss")


def _reduce(per_token: Tensor, pred: Tensor, mask: Tensor, weights: Tensor | None, n_tokens: Count) -> Tensor:
    if pred.shape != mask.shape or per_token.shape != mask.shape:
        raise ValueError(
            f"pred {tuple(pred.shape)}, target and mask {tuple(mask.shape)} must be equal [B, T]"
        )
    m = mask.to(per_token.dtype)
    if weights is not None:
        m = m * weights.detach().to(per_token.dtype)
    return (per_token * m).sum() / n_tokens


@CRITIC_LOSSES.register("mse")
def mse(
    pred: Tensor, target: Tensor, mask: Tensor, *, weights: Tensor | None = None, n_tokens: Count
) -> tuple[Tensor, dict[str, float]]:
    """``l = (V - R)^2 / 2`` per token."""
    err = pred - target.detach().to(pred.dtype)
    loss = _reduce(0.5 * err.pow(2), pred, mask, weights, n_tokens)
    return loss, {"critic/loss": loss.item()}


@CRITIC_LOSSES.register("bce")
def bce(
    pred: Tensor, target: Tensor, mask: Tensor, *, weights: Tensor | None = None, n_tokens: Count
) -> tuple[Tensor, dict[str, float]]:
    """PACT's critic for returns in ``[0, 1]``: ``l = -[R log s(v) + (1 - R) log(1 - s(v))]``, ``s`` the sigmoid.

    The value fed to the estimators is ``sigmoid(v)``. A target outside ``[0, 1]`` is an error.
    """
    t = target.detach().to(pred.dtype)
    m = mask.bool()
    if bool(((t < 0) | (t > 1))[m].any()):
        raise ValueError("bce critic needs returns in [0, 1]; use 'mse' for other rewards")
    per_token = F.binary_cross_entropy_with_logits(pred, torch.where(m, t, 0.5), reduction="none")
    loss = _reduce(per_token, pred, mask, weights, n_tokens)
    return loss, {"critic/loss": loss.item()}


def pact_critic_weights(new_logp: Tensor, old_logp: Tensor, mask: Tensor, cap: float = 2.0) -> Tensor:
    """Importance weights ``[B, T]`` that make the old rollouts' returns targets for the *updated* actor.

    The return from state ``s_t`` depends on the actions from ``t`` on, so (ours, issue 23)::

        w_t = min(exp(sum_{k >= t, k action} log pi_new(a_k) - log pi_old(a_k)), cap)

    detached, 0 off the mask. ``E_old[w_t l(v_t, G_t)] = E_new[l(v_t, G_t)]`` before the cap, so
    the critic fitted with these weights (``CRITIC_LOSSES[...](..., weights=w)``) tracks the policy
    that acts next (PACT's actor-then-critic order). ``new_logp``: log-probs of the rollout's tokens
    under the actor after its update; ``old_logp``: under the policy that sampled them.
    """
    if new_logp.shape != old_logp.shape or new_logp.shape != mask.shape:
        raise ValueError(f"new_logp {tuple(new_logp.shape)}, old_logp and mask must be equal [B, T]")
    m = mask.to(new_logp.dtype)
    log_r = ((new_logp - old_logp) * m).detach()
    tail = log_r.flip(1).cumsum(1).flip(1).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return tail.exp().clamp(0.0, cap) * m
