"""Policy losses, registered by name in ``LOSSES``.

Signature::

    loss(logp, old_logp, adv, mask, cfg, *, ref_logp=None, is_weights=None, n_tokens, n_seqs)
        -> (loss: scalar Tensor, metrics: dict[str, float])

``logp``, ``old_logp``, ``mask``, ``ref_logp``, ``is_weights``: ``[B, T]`` per-token values
(log-probabilities of the sampled tokens under the current, behaviour and reference policies);
``adv``: ``[B]`` (broadcast over tokens) or ``[B, T]``. ``n_tokens``/``n_seqs`` are the global
counts of the optimisation batch (see ``aggregation.py``). Metrics are token means over this
micro-batch's mask; the caller averages them.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from parpo.algorithms.aggregation import AGGREGATIONS, Count
from parpo.algorithms.config import LossConfig
from parpo.algorithms.kl import KL
from parpo_core.names import NameRegistry

# exp() of a log-ratio beyond this is an overflow, not a signal (verl clamps at 20 too).
_LOG_RATIO_CLAMP = 20.0


class LossFn(Protocol):
    def __call__(
        self,
        logp: Tensor,
        old_logp: Tensor,
        adv: Tensor,
        mask: Tensor,
        cfg: LossConfig,
        *,
        ref_logp: Tensor | None = None,
        is_weights: Tensor | None = None,
        n_tokens: Count,
        n_seqs: Count,
    ) -> tuple[Tensor, dict[str, float]]: ...


LOSSES: NameRegistry[LossFn] = NameRegistry("policy loss")


def tis_weights(old_logp: Tensor, rollout_logp: Tensor, cap: float = 2.0) -> Tensor:
    """Truncated importance weights ``clip(pi_old / pi_rollout, 0, cap)`` ``[B, T]``, detached.

    Corrects the mismatch between the trainer's behaviour logprobs and the rollout engine's
    (e.g. vLLM) logprobs of the same tokens (Yao et al. 2025, "Your efficient RL framework
    secretly brings you off-policy RL training").
    """
    log_w = (old_logp - rollout_logp).detach().clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return log_w.exp().clamp(0.0, cap)


def _masked_mean(x: Tensor, mask: Tensor) -> float:
    m = mask.to(x.dtype)
    return (x.detach() * m).sum().item() / max(m.sum().item(), 1.0)


@LOSSES.register("ppo")
def ppo(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    cfg: LossConfig,
    *,
    ref_logp: Tensor | None = None,
    is_weights: Tensor | None = None,
    n_tokens: Count,
    n_seqs: Count,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate (Schulman et al. 2017) with asymmetric clip, dual clip, TIS, UP and KL.

    Per token, with ``rho = exp(logp - old_logp)``::

        l = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high))      # asymmetric clip (DAPO)
        l = min(l, -A c)               where A < 0                     # dual clip (Ye et al. 2020)
        l = -A pi / sg(pi)             where A > 0, if cfg.up          # UP: positives unclipped
        l = w * l,  w = sg(clip(is_weights, 0, tis_cap))               # if cfg.tis
        l = l + beta * k(logp, ref_logp)                               # if kl_beta > 0, placement "loss"

    ``pi / sg(pi)`` equals 1 with gradient ``grad log pi``: positive advantages get the on-policy
    policy gradient with no trust region, negative ones keep PPO's clipping. ``is_weights`` are
    the raw ratios ``pi_old / pi_rollout`` (or ``tis_weights(...)``); they are clipped here.
    Then aggregated with ``AGGREGATIONS[cfg.aggregation]``.
    """
    if logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise ValueError(f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask must match")
    a = adv.unsqueeze(-1) if adv.ndim == logp.ndim - 1 else adv
    a = a.detach().to(logp.dtype).expand_as(logp)
    log_ratio = (logp - old_logp.detach()).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    pg_unclipped = -a * ratio
    pg_clipped = -a * ratio.clamp(1.0 - cfg.clip_eps_low, 1.0 + cfg.clip_eps_high)
    pg = torch.maximum(pg_unclipped, pg_clipped)
    clipped = pg_clipped > pg_unclipped
    dual = torch.zeros_like(clipped)
    if cfg.dual_clip_c is not None:
        bound = -a * cfg.dual_clip_c
        dual = (a < 0) & (pg > bound)
        pg = torch.where(dual, bound, pg)
    if cfg.up:
        pg = torch.where(a > 0, -a * torch.exp(logp - logp.detach()), pg)
        clipped = clipped & (a <= 0)
    metrics: dict[str, float] = {
        "pg/clipfrac": _masked_mean(clipped.to(logp.dtype), mask),
        "pg/dual_clipfrac": _masked_mean(dual.to(logp.dtype), mask),
        "pg/ratio_mean": _masked_mean(ratio, mask),
        "pg/approx_kl_old": _masked_mean(-log_ratio, mask),
    }
    if cfg.tis:
        if is_weights is None:
            raise ValueError("LossConfig.tis is on but no is_weights were passed")
        w = is_weights.detach().to(logp.dtype).clamp(0.0, cfg.tis_cap)
        pg = pg * w
        metrics["tis/mean"] = _masked_mean(w, mask)
        metrics["tis/capped_frac"] = _masked_mean((w >= cfg.tis_cap).to(logp.dtype), mask)
    elif is_weights is not None:
        raise ValueError("is_weights were passed but LossConfig.tis is off; turn it on or drop them")
    agg = AGGREGATIONS[cfg.aggregation]
    loss_mat = pg
    if cfg.kl_beta > 0 and cfg.kl_placement == "loss":
        if ref_logp is None:
            raise ValueError("kl_beta > 0 with kl_placement 'loss' needs ref_logp")
        kl = KL[cfg.kl_estimator](logp, ref_logp.detach())
        loss_mat = pg + cfg.kl_beta * kl
        metrics["kl/mean"] = _masked_mean(kl, mask)
    kw = {"n_tokens": n_tokens, "n_seqs": n_seqs, "norm_len": cfg.norm_len}
    loss = agg(loss_mat, mask, **kw)
    metrics["loss/pg"] = agg(pg.detach(), mask, **kw).item()
    metrics["loss/total"] = loss.item()
    return loss, metrics


def compute_loss(
    logp: Tensor,
    old_logp: Tensor,
    adv: Tensor,
    mask: Tensor,
    cfg: LossConfig,
    *,
    ref_logp: Tensor | None = None,
    is_weights: Tensor | None = None,
    n_tokens: Count,
    n_seqs: Count,
) -> tuple[Tensor, dict[str, float]]:
    """Look up ``cfg.name`` in ``LOSSES`` and call it."""
    return LOSSES[cfg.name](
        logp,
        old_logp,
        adv,
        mask,
        cfg,
        ref_logp=ref_logp,
        is_weights=is_weights,
        n_tokens=n_tokens,
        n_seqs=n_seqs,
    )
