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
    _check_shapes(logp, old_logp, mask)
    log_ratio = (logp - old_logp.detach()).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return _clipped_pg(logp, log_ratio, adv, mask, cfg, ref_logp, is_weights, n_tokens, n_seqs)


def _check_shapes(logp: Tensor, old_logp: Tensor, mask: Tensor) -> None:
    if logp.shape != old_logp.shape or logp.shape != mask.shape:
        raise ValueError(f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask must match")


def _token_adv(adv: Tensor, logp: Tensor) -> Tensor:
    a = adv.unsqueeze(-1) if adv.ndim == logp.ndim - 1 else adv
    return a.detach().to(logp.dtype).expand_as(logp)


def _clipped_pg(
    logp: Tensor,
    log_ratio: Tensor,
    adv: Tensor,
    mask: Tensor,
    cfg: LossConfig,
    ref_logp: Tensor | None,
    is_weights: Tensor | None,
    n_tokens: Count,
    n_seqs: Count,
) -> tuple[Tensor, dict[str, float]]:
    """The PPO surrogate of ``ppo``'s docstring for a given ``log_ratio`` ``[B, T]`` (clamped)."""
    a = _token_adv(adv, logp)
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
    return _aggregate(pg, logp, mask, cfg, ref_logp, n_tokens, n_seqs, metrics)


def _aggregate(
    pg: Tensor,
    logp: Tensor,
    mask: Tensor,
    cfg: LossConfig,
    ref_logp: Tensor | None,
    n_tokens: Count,
    n_seqs: Count,
    metrics: dict[str, float],
) -> tuple[Tensor, dict[str, float]]:
    """Token policy-gradient terms ``pg`` ``[B, T]`` plus the KL term, aggregated; fills ``loss/*``."""
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


def turn_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor, turn: Tensor | None = None) -> Tensor:
    """MPO's turn-level log-ratio per token ``[B, T]``, 0 off the mask::

        log rho_{k,t} = sg(mean_{s in k}(log pi_s - log pi_old_s)) + log pi_t - sg(log pi_t)

    Its value is the turn's ``log rho_k`` (clamped to +-20) for every token of turn ``k``; its
    gradient reaches only token ``t``'s own log-prob (stop-gradient on the turn's other tokens).
    ``turn``: ``[B, T]`` turn index of each action token; None: each row is one turn (the native
    policy, one row per step).
    """
    m = mask.bool()
    diff = torch.where(m, (logp - old_logp).detach(), torch.zeros_like(logp))
    if turn is None:
        mean = diff.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1)
        turn_mean = mean.expand_as(logp)
    else:
        if turn.shape != mask.shape:
            raise ValueError(f"turn {tuple(turn.shape)} must be shaped like mask {tuple(mask.shape)}")
        K = int(turn[m].max().item()) + 1 if m.any() else 1
        key = (torch.arange(m.shape[0], device=m.device).unsqueeze(1) * K + turn.clamp_min(0)).where(m, 0)
        sums = torch.zeros(m.shape[0] * K, dtype=logp.dtype, device=logp.device).index_add_(
            0, key.flatten(), diff.flatten()
        )
        count = torch.zeros_like(sums).index_add_(0, key.flatten(), m.flatten().to(logp.dtype))
        turn_mean = (sums / count.clamp_min(1))[key]
    log_rho = turn_mean.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP) + logp - logp.detach()
    return torch.where(m, log_rho, torch.zeros_like(logp))


@LOSSES.register("turn_ratio")
def turn_ratio(
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
    turn: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """MPO's turn-level ratio (as specified in issue 23), PPO-clipped per turn.

    ``rho_k = exp(mean_{t in k}(log pi - log pi_old))`` replaces the token ratio in ``ppo``'s
    surrogate (clip, dual clip, UP, TIS, KL, aggregation as there) through ``turn_log_ratio``: each
    token of turn ``k`` carries the value ``rho_k``, so the clip decision is per turn, and its
    gradient ``rho_k grad log pi_t`` (stop-gradient on the turn's other tokens), so per-token credit
    ``A_{k,t}`` (``turn_gae``) still reaches each token. ``turn`` None: each row is one turn.
    """
    _check_shapes(logp, old_logp, mask)
    log_ratio = turn_log_ratio(logp, old_logp, mask, turn)
    return _clipped_pg(logp, log_ratio, adv, mask, cfg, ref_logp, is_weights, n_tokens, n_seqs)


@LOSSES.register("sao_mask")
def sao_mask(
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
    """SAO's strict two-sided token mask: ``l_t = -sg(f(r_t)) A_t log pi(a_t)``, ``r_t = pi / pi_roll``,
    ``f(r) = r`` inside ``(1 - eps_low, 1 + eps_high)`` (open), else 0.

    ``old_logp`` must be the rollout engine's log-probs ``pi_roll`` (for the native policy they are
    the behaviour log-probs). A token outside the band gets no gradient whatever the sign of
    ``A`` (PPO keeps the gradient on the side that lowers the objective). The loss *value* is a
    surrogate, its gradient ``-f(r) A grad log pi`` is the point. KL and aggregation as in ``ppo``;
    ``dual_clip_c`` does not apply; ``tis`` and ``up`` are errors (the ratio is already against
    ``pi_roll``; masked tokens get no gradient by design).
    """
    _check_shapes(logp, old_logp, mask)
    if cfg.tis or is_weights is not None:
        raise ValueError(
            "sao_mask's ratio is against the rollout log-probs already: pass them as old_logp, tis off"
        )
    if cfg.up:
        raise ValueError("sao_mask masks tokens outside the band whatever A's sign; turn LossConfig.up off")
    a = _token_adv(adv, logp)
    log_ratio = (logp - old_logp).detach().clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    inside = (ratio > 1.0 - cfg.clip_eps_low) & (ratio < 1.0 + cfg.clip_eps_high)
    f = torch.where(inside, ratio, torch.zeros_like(ratio))
    pg = -f * a * logp
    metrics: dict[str, float] = {
        "pg/clipfrac": _masked_mean((~inside).to(logp.dtype), mask),
        "pg/ratio_mean": _masked_mean(ratio, mask),
        "pg/approx_kl_old": _masked_mean(-log_ratio, mask),
    }
    return _aggregate(pg, logp, mask, cfg, ref_logp, n_tokens, n_seqs, metrics)


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
    turn: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Look up ``cfg.name`` in ``LOSSES`` and call it. ``turn`` [B, T] (turn ids of a multi-turn
    row, for ``turn_ratio``) is passed only when given: the other losses take no turns."""
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
        **({} if turn is None else {"turn": turn}),
    )
