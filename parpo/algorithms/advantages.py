"""Advantage estimators: one function per estimator, registered by name in ``ADVANTAGES``.

Every estimator has the signature::

    fn(rewards: dict[str, Tensor[B]], group: Tensor[B], user: Tensor[B],
       anchors: AnchorSnapshot | None, cfg: AdvantageConfig) -> (adv: Tensor[B], metrics: dict[str, float])

``rewards`` holds one scalar per rollout and reward component (``task/<name>``, ``preference``);
``group`` holds integer group ids (rollouts of the same prompt share one; ids need not be dense);
``user`` holds dense integer user indices (the anchor rows). The loss broadcasts ``adv`` over the
tokens of each rollout with the mask. Std is the population std unless ``cfg.sample_std``.

Metrics (floats, never logged here): per component ``<k>/frac_zero_std`` (fraction of *groups*
whose std is at most ``eps``: no learning signal from that component there); for the estimators
that normalise components one by one (``gdpo``, ``parpo``) also ``<k>/adv_mean``, ``<k>/adv_std``
of that component's normalised advantage before weighting; for those that sum first (``grpo``,
``rloo``, ``dr_grpo``) ``total/frac_zero_std``; always ``adv/mean``, ``adv/std`` of the returned
advantage (population std).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from parpo.algorithms.anchors import AnchorSnapshot
from parpo.algorithms.config import AdvantageConfig
from parpo.algorithms.stats import GroupStats, group_mean_std, whiten
from parpo_core.names import NameRegistry


class AdvantageFn(Protocol):
    def __call__(
        self,
        rewards: dict[str, Tensor],
        group: Tensor,
        user: Tensor,
        anchors: AnchorSnapshot | None,
        cfg: AdvantageConfig,
    ) -> tuple[Tensor, dict[str, float]]: ...


ADVANTAGES: NameRegistry[AdvantageFn] = NameRegistry("advantage estimator")


# --------------------------------------------------------------------------- helpers


def _float_dtype(rewards: dict[str, Tensor]) -> torch.dtype:
    return torch.float64 if any(r.dtype == torch.float64 for r in rewards.values()) else torch.float32


def _check(rewards: dict[str, Tensor], group: Tensor, user: Tensor, cfg: AdvantageConfig) -> torch.dtype:
    if not rewards:
        raise ValueError("rewards is empty: pass at least one reward component")
    for k, r in rewards.items():
        if r.shape != group.shape or r.ndim != 1:
            raise ValueError(
                f"reward {k!r} has shape {tuple(r.shape)}, expected {tuple(group.shape)} like group"
            )
    if user.shape != group.shape:
        raise ValueError(f"user has shape {tuple(user.shape)}, expected {tuple(group.shape)} like group")
    if cfg.weights:
        missing = [k for k in rewards if k not in cfg.weights]
        if missing:
            raise KeyError(
                f"no weight for reward component(s) {missing}; add them to AdvantageConfig.weights"
            )
    return _float_dtype(rewards)


def _weight(cfg: AdvantageConfig, k: str) -> float:
    return cfg.weights.get(k, 1.0) if cfg.weights else 1.0


def _std_metrics(metrics: dict[str, float], key: str, st: GroupStats, eps: float) -> None:
    metrics[f"{key}/frac_zero_std"] = (st.group_std <= eps).float().mean().item()


def _adv_metrics(metrics: dict[str, float], mean_key: str, std_key: str, adv: Tensor) -> None:
    metrics[mean_key] = adv.mean().item()
    metrics[std_key] = adv.std(unbiased=False).item()


def _weighted_total(rewards: dict[str, Tensor], cfg: AdvantageConfig, dtype: torch.dtype) -> Tensor:
    first = next(iter(rewards.values()))
    total = torch.zeros(first.shape, dtype=dtype, device=first.device)
    for k, r in rewards.items():
        total = total + _weight(cfg, k) * r.to(dtype)
    return total


def _group_normalise(st: GroupStats, eps: float) -> Tensor:
    return st.centered / (st.std + eps)


def _finish(
    total: Tensor, metrics: dict[str, float], do_whiten: bool, cfg: AdvantageConfig
) -> tuple[Tensor, dict[str, float]]:
    adv = whiten(total, cfg.eps, sample=cfg.sample_std) if do_whiten else total
    _adv_metrics(metrics, "adv/mean", "adv/std", adv)
    return adv, metrics


def _total_estimator(
    rewards: dict[str, Tensor], group: Tensor, user: Tensor, cfg: AdvantageConfig
) -> tuple[Tensor, GroupStats, dict[str, float]]:
    dtype = _check(rewards, group, user, cfg)
    total = _weighted_total(rewards, cfg, dtype)
    st = group_mean_std(total, group, sample=cfg.sample_std)
    metrics: dict[str, float] = {}
    for k, r in rewards.items():  # the summed estimators still report which components carry signal
        _std_metrics(metrics, k, group_mean_std(r.to(dtype), group, sample=cfg.sample_std), cfg.eps)
    _std_metrics(metrics, "total", st, cfg.eps)
    return total, st, metrics


# --------------------------------------------------------------------------- estimators


@ADVANTAGES.register("grpo")
def grpo(
    rewards: dict[str, Tensor],
    group: Tensor,
    user: Tensor,
    anchors: AnchorSnapshot | None,
    cfg: AdvantageConfig,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO (Shao et al. 2024, arXiv 2402.03300): ``r = sum_k w_k r_k``, ``A = (r - mean_g) / (std_g + eps)``.

    Components are summed *before* normalisation (the thing GDPO and PARPO avoid). Anchors are
    ignored. Whitening only if ``cfg.whiten`` is true.
    """
    total, st, metrics = _total_estimator(rewards, group, user, cfg)
    return _finish(_group_normalise(st, cfg.eps), metrics, bool(cfg.whiten), cfg)


@ADVANTAGES.register("rloo")
def rloo(
    rewards: dict[str, Tensor],
    group: Tensor,
    user: Tensor,
    anchors: AnchorSnapshot | None,
    cfg: AdvantageConfig,
) -> tuple[Tensor, dict[str, float]]:
    """RLOO (Ahmadian et al. 2024, arXiv 2402.14740): leave-one-out baseline, no std.

    ``A_i = r_i - (sum_g r - r_i) / (n_g - 1) = n_g / (n_g - 1) * (r_i - mean_g)``; 0 for groups of one.
    ``r`` is the weighted sum of components.
    """
    total, st, metrics = _total_estimator(rewards, group, user, cfg)
    n = st.count.to(total.dtype)
    adv = torch.where(st.count > 1, st.centered * n / (n - 1).clamp_min(1), torch.zeros_like(total))
    return _finish(adv, metrics, bool(cfg.whiten), cfg)


@ADVANTAGES.register("dr_grpo")
def dr_grpo(
    rewards: dict[str, Tensor],
    group: Tensor,
    user: Tensor,
    anchors: AnchorSnapshot | None,
    cfg: AdvantageConfig,
) -> tuple[Tensor, dict[str, float]]:
    """Dr. GRPO (Liu et al. 2025, arXiv 2503.20783): ``A = r - mean_g``, no std division.

    It is Dr. GRPO only together with ``AGGREGATIONS["dr_grpo"]`` (a constant token normaliser
    instead of ``1/|o_i|``): both GRPO biases (std and length) are removed.
    """
    total, st, metrics = _total_estimator(rewards, group, user, cfg)
    return _finish(st.centered, metrics, bool(cfg.whiten), cfg)


@ADVANTAGES.register("gdpo")
def gdpo(
    rewards: dict[str, Tensor],
    group: Tensor,
    user: Tensor,
    anchors: AnchorSnapshot | None,
    cfg: AdvantageConfig,
) -> tuple[Tensor, dict[str, float]]:
    """GDPO (arXiv 2601.05242): normalise each component in its group, weighted sum, batch whitening.

    ``A = whiten(sum_k w_k (r_k - mean_g(r_k)) / (std_g(r_k) + eps))``. Whitening is on unless
    ``cfg.whiten`` is explicitly ``False``. This is PARPO without anchors.
    """
    return _componentwise(rewards, group, user, cfg, by_user=None)


def _componentwise(
    rewards: dict[str, Tensor], group: Tensor, user: Tensor, cfg: AdvantageConfig, by_user: str | None
) -> tuple[Tensor, dict[str, float]]:
    """GDPO's per-component normalisation; the component ``by_user`` (if any) is normalised over
    each user's rollouts in the batch instead of its group (``gdpo_user``)."""
    dtype = _check(rewards, group, user, cfg)
    metrics: dict[str, float] = {}
    total = torch.zeros(group.shape, dtype=dtype, device=group.device)
    for k, r in rewards.items():
        st = group_mean_std(r.to(dtype), group, sample=cfg.sample_std)
        _std_metrics(metrics, k, st, cfg.eps)
        if k == by_user:
            pooled = group_mean_std(r.to(dtype), user, sample=cfg.sample_std)
            metrics[f"{k}/frac_user_pooled"] = (pooled.count > st.count).to(dtype).mean().item()
            st = pooled
        a = _group_normalise(st, cfg.eps)
        _adv_metrics(metrics, f"{k}/adv_mean", f"{k}/adv_std", a)
        total = total + _weight(cfg, k) * a
    return _finish(total, metrics, cfg.whiten is not False, cfg)


@ADVANTAGES.register("gdpo_user")
def gdpo_user(
    rewards: dict[str, Tensor],
    group: Tensor,
    user: Tensor,
    anchors: AnchorSnapshot | None,
    cfg: AdvantageConfig,
) -> tuple[Tensor, dict[str, float]]:
    """GDPO with a per-user normaliser (issue 17's ablation of PARPO's EMA anchor): the task
    components as in ``gdpo``; the preference (``cfg.preference_key``) normalised by the mean and
    std of *that user's rollouts in this batch* (all their groups pooled), not by its group and
    not by a history::

        A_pref_i = (r_i - mean_{j: user_j = user_i} r_j) / (std_{j: user_j = user_i} r_j + eps)

    Stateless: anchors are ignored. Where a user has one group in the batch it is GDPO's group
    normalisation; it differs where users recur within an update. Whitening as ``gdpo``.
    Extra metric ``preference/frac_user_pooled``: rollouts whose user has more rollouts in the
    batch than in their group (where the normaliser differs from GDPO's).
    """
    return _componentwise(rewards, group, user, cfg, by_user=cfg.preference_key)


@ADVANTAGES.register("parpo")
def parpo(
    rewards: dict[str, Tensor],
    group: Tensor,
    user: Tensor,
    anchors: AnchorSnapshot | None,
    cfg: AdvantageConfig,
) -> tuple[Tensor, dict[str, float]]:
    """PARPO (arXiv 2605.23382, "From Correctness to Preference"): decoupled task and anchored preference.

    - Task track: every ``task/<name>`` component is normalised in its group, one by one (GDPO).
    - Preference track (``cfg.preference_key``), for rollout ``i`` of user ``u`` in group ``g``
      with anchor mean ``mu_u`` and variance ``var_u`` (``sigma_u = sqrt(var_u)``) from the
      *pre-update* snapshot::

          b = max(mean_g, mu_u - gamma * sigma_u)
          s = max(std_g, sigma_u, kappa * (|mu_u| + sigma_u)) + eps
          A_pref = (r - b) / s

      The baseline never drops below the group mean, so a group that is poor *for this user*
      gets negative advantages even when its rollouts differ little. Every term of ``b`` and
      ``s`` scales with the user's own rewards, so multiplying one user's preference rewards and
      history by ``c > 0`` leaves ``A_pref`` unchanged (up to ``eps``); the ``kappa`` floor keeps a
      zero-variance group under a high anchor bounded (``|A| <= |r - b| / (kappa (|mu_u| + sigma_u))``)
      instead of dividing by ``eps``. No global prior: while a user has fewer than ``n_min``
      anchor updates (or ``anchors`` is None) the preference track is plain group normalisation.
    - ``A = sum_k w_k A_k``; batch whitening only if ``cfg.whiten`` (off by default: it would
      cancel an anchor shift shared by many groups).
    - Ablation (``cfg.anchor_terms``): ``baseline`` keeps the anchor in ``b`` only
      (``s = std_g + eps``: without the ``kappa`` floor a zero-std group under a higher anchor
      divides by ``eps``); ``scale`` keeps it in ``s`` only (``b = mean_g``); ``both`` is PARPO.

    Extra metrics: ``preference/frac_anchored`` (rollouts whose user anchor is used),
    ``preference/frac_anchor_baseline`` and ``preference/frac_anchor_scale`` (rollouts where the
    anchor term, not the group statistic, sets ``b`` / ``s``).
    """
    dtype = _check(rewards, group, user, cfg)
    pref = cfg.preference_key
    bad = [k for k in rewards if k != pref and not k.startswith(cfg.task_prefix)]
    if bad:
        raise ValueError(f"parpo reward components must be {cfg.task_prefix!r}<name> or {pref!r}; got {bad}")
    metrics: dict[str, float] = {}
    total = torch.zeros(group.shape, dtype=dtype, device=group.device)
    for k, r in rewards.items():
        r = r.to(dtype)
        st = group_mean_std(r, group, sample=cfg.sample_std)
        _std_metrics(metrics, k, st, cfg.eps)
        a = _group_normalise(st, cfg.eps)
        if k == pref:
            a = _anchored(a, st, user, anchors, cfg, metrics)
        _adv_metrics(metrics, f"{k}/adv_mean", f"{k}/adv_std", a)
        total = total + _weight(cfg, k) * a
    return _finish(total, metrics, bool(cfg.whiten), cfg)


def _anchor_terms(
    anchors: AnchorSnapshot, user: Tensor, cfg: AdvantageConfig, dtype: torch.dtype
) -> tuple[Tensor, Tensor, Tensor]:
    """Per rollout ``[B]``: whether the user's anchor is in use (``n_min`` updates), its baseline
    ``mu_u - gamma sigma_u`` and its scale floor ``max(sigma_u, kappa (|mu_u| + sigma_u))``."""
    mu, var, count = anchors.lookup(user)
    mu, sigma = mu.to(dtype), var.to(dtype).clamp_min(0).sqrt()
    return count >= cfg.n_min, mu - cfg.gamma * sigma, torch.maximum(sigma, cfg.kappa * (mu.abs() + sigma))


def value_reward(
    rewards: dict[str, Tensor], user: Tensor, anchors: AnchorSnapshot | None, cfg: AdvantageConfig
) -> tuple[Tensor, dict[str, float]]:
    """The one scalar reward ``[B]`` per rollout that the value-based estimators (``VALUE_ESTIMATORS``)
    see under PARPO: the weighted task components plus the anchored preference::

        R = sum_{k != pref} w_k r_k + w_pref * (r_pref - b_u) / s_u
        b_u = mu_u - gamma * sigma_u,   s_u = max(sigma_u, kappa * (|mu_u| + sigma_u)) + eps

    The user anchor alone sets ``b_u`` and ``s_u`` (the critic, not a group, is the baseline). Where
    the user has fewer than ``n_min`` anchor updates, or ``anchors`` is None (anchors off), the
    preference enters raw, so then ``R = sum_k w_k r_k``: the estimator's plain form.
    Metrics: ``preference/frac_anchored``, ``value_reward/mean``, ``value_reward/std``.
    """
    dtype = _check(rewards, user, user, cfg)
    pref = cfg.preference_key
    plain = {k: r for k, r in rewards.items() if k != pref}
    total = (
        _weighted_total(plain, cfg, dtype)
        if plain
        else torch.zeros(user.shape, dtype=dtype, device=user.device)
    )
    metrics: dict[str, float] = {"preference/frac_anchored": 0.0}
    if pref in rewards:
        p = rewards[pref].to(dtype)
        if anchors is not None:
            ready, base, scale = _anchor_terms(anchors, user, cfg, dtype)
            p = torch.where(ready, (p - base) / (scale + cfg.eps), p)
            metrics["preference/frac_anchored"] = ready.to(dtype).mean().item()
        total = total + _weight(cfg, pref) * p
    _adv_metrics(metrics, "value_reward/mean", "value_reward/std", total)
    return total, metrics


def _anchored(
    plain: Tensor,
    st: GroupStats,
    user: Tensor,
    anchors: AnchorSnapshot | None,
    cfg: AdvantageConfig,
    metrics: dict[str, float],
) -> Tensor:
    """Preference advantage ``[B]`` against the user anchor where the user has ``n_min`` updates."""
    if anchors is None:
        metrics["preference/frac_anchored"] = 0.0
        return plain
    ready, anchor_base, anchor_scale = _anchor_terms(anchors, user, cfg, plain.dtype)
    # r - b = (r - mean_g) - max(0, anchor_base - mean_g): exact zero when the group mean binds.
    lift = (anchor_base - st.mean).clamp_min(0)
    # The ablation (cfg.anchor_terms) drops one term; the group's statistic then stands alone.
    if cfg.anchor_terms == "scale":
        lift = torch.zeros_like(lift)
    if cfg.anchor_terms == "baseline":
        anchor_scale = torch.zeros_like(anchor_scale)
    scale = torch.maximum(st.std, anchor_scale) + cfg.eps
    anchored = (st.centered - lift) / scale
    frac = ready.to(plain.dtype).mean()
    metrics["preference/frac_anchored"] = frac.item()
    metrics["preference/frac_anchor_baseline"] = (ready & (lift > 0)).to(plain.dtype).mean().item()
    metrics["preference/frac_anchor_scale"] = (ready & (anchor_scale > st.std)).to(plain.dtype).mean().item()
    return torch.where(ready, anchored, plain)


def compute_advantages(
    rewards: dict[str, Tensor],
    group: Tensor,
    user: Tensor,
    anchors: AnchorSnapshot | None,
    cfg: AdvantageConfig,
) -> tuple[Tensor, dict[str, float]]:
    """Look up ``cfg.estimator`` in ``ADVANTAGES`` and call it."""
    return ADVANTAGES[cfg.estimator](rewards, group, user, anchors, cfg)
