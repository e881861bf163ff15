"""Value-based credit for the native policy's rollouts: episodes x steps grids, the estimators of
``VALUE_ESTIMATORS`` on them, critic targets and PACT's importance weights.

The native policy takes one decision per step (a tool call and its arguments or a slate: the
slots of ``parpo.policy.tokens``) from one state, so its value head gives one value per *step*
and a step is the estimators' action unit: ``gae``, ``skip_obs_gae`` and ``pact`` run over the
``[E, S]`` grid of episodes x steps (the episode reward on its last step). ``turn_gae`` runs over
``[E, S * T]`` tokens with turn = step, the step's value on each of its tokens, so its within-turn
weights share a step's credit among the step's own choices (uniform: every token of a step gets
the step's advantage). Every step of an episode is the policy's, so no observation sits inside
the grid: ``skip_obs_gae`` and ``gae`` differ only in their lambdas here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from parpo.algorithms import (
    CRITIC_LOSSES,
    VALUE_ESTIMATORS,
    AnchorStore,
    ValueConfig,
    outcome_rewards,
    pact_critic_weights,
    value_reward,
    whiten,
)
from parpo.trainer.config import PolicyTrainConfig
from parpo.trainer.rollout import Rollouts


def step_grid(episode: Tensor, n_episodes: int) -> Tensor:
    """``[E, S_max]`` int64: the sample index of step ``j`` of episode ``e``, -1 where it has none.

    ``episode`` ``[N]``: each sample's episode; an episode's samples appear in step order (as
    ``collect`` records them, step after step)."""
    n = episode.numel()
    counts = torch.bincount(episode, minlength=n_episodes)
    order = torch.argsort(episode, stable=True)
    starts = counts.cumsum(0) - counts
    step = torch.empty_like(episode)
    step[order] = torch.arange(n, device=episode.device) - starts[episode[order]]
    grid = torch.full(
        (n_episodes, int(counts.max()) if n else 0), -1, dtype=torch.int64, device=episode.device
    )
    grid[episode, step] = torch.arange(n, device=episode.device)
    return grid


def explained_variance(target: Tensor, values: Tensor) -> float:
    """``1 - Var(target - V) / Var(target)`` over matching 1-D ``target``, ``values`` (0 when the
    targets do not vary beyond float rounding: the ratio would then be noise)."""
    if not target.numel():
        return 0.0
    var = float(target.var(unbiased=False))
    if var <= 1e-10 * (1.0 + float(target.abs().max()) ** 2):
        return 0.0
    return 1.0 - float((target - values).var(unbiased=False)) / var


def critic_target(target: Tensor, loss: str) -> tuple[Tensor, dict[str, float]]:
    """The critic's regression target for ``CRITIC_LOSSES[loss]``: a BCE critic's is a probability,
    so targets are clamped to ``[0, 1]`` (penalties or anchored rewards can leave it; the actor's
    advantage keeps them); ``critic/target_clamped_frac`` says how often."""
    if loss != "bce":
        return target, {}
    out = float(((target < 0) | (target > 1)).float().mean()) if target.numel() else 0.0
    return target.clamp(0.0, 1.0), {"critic/target_clamped_frac": out}


@dataclass
class StepCredit:
    """What the update needs per sample ``N``: the actor's advantage ``adv`` [N, T] and the
    critic's target ``target`` [N] (for a BCE critic, in ``[0, 1]``)."""

    adv: Tensor
    target: Tensor


def step_credit(
    reward: Tensor,
    values: Tensor,
    token_mask: Tensor,
    entropy: Tensor,
    episode: Tensor,
    cfg: ValueConfig,
    *,
    whiten_adv: bool,
) -> tuple[StepCredit, dict[str, float]]:
    """Credit of ``N`` samples from ``E = reward.numel()`` episodes.

    ``reward`` [E] the episode's scalar reward (``value_reward``); ``values`` [N] the value of each
    step's state (``sigmoid`` of the head for a BCE critic); ``token_mask``, ``entropy`` [N, T] the
    policy tokens of each step and their entropies; ``episode`` [N]. ``whiten_adv``: whiten the
    advantages over the action units. Metrics: the estimator's, and
    ``critic/explained_variance`` (``1 - Var(target - V) / Var(target)`` over the steps).
    """
    E, (N, T) = reward.numel(), token_mask.shape
    grid = step_grid(episode, E)
    has = grid >= 0
    at = grid.clamp_min(0)
    if cfg.estimator == "turn_gae":  # tokens, turn = step
        mask = (token_mask[at] & has.unsqueeze(-1)).flatten(1)  # [E, S*T]
        width = T
    else:  # one action unit per step
        mask, width = has, 1
    S = grid.shape[1]
    vals = values[at].to(reward.dtype).unsqueeze(-1).expand(E, S, width).flatten(1)
    ent = entropy[at] if width == T else entropy.sum(-1)[at].unsqueeze(-1)
    turn = torch.arange(S, device=reward.device).view(1, S, 1).expand(E, S, width).flatten(1)
    credit, metrics = VALUE_ESTIMATORS[cfg.estimator](
        outcome_rewards(reward, mask),
        torch.where(mask, vals, torch.zeros_like(vals)),
        mask,
        cfg,
        turn=turn,
        entropy=ent.flatten(1).to(reward.dtype),
    )
    adv = credit.adv
    if whiten_adv:
        adv = torch.zeros_like(adv).masked_scatter(mask, whiten(adv[mask]))
    out_adv = torch.zeros(N, width, dtype=adv.dtype, device=adv.device)
    out_adv[grid[has]] = adv.view(E, S, width)[has]
    # the critic's target sits on each step's first action token (the only one in its value mask)
    out_target = torch.zeros(N, dtype=adv.dtype, device=adv.device)
    out_target[grid[has]] = (credit.returns * credit.value_mask).view(E, S, width).sum(-1)[has]
    metrics["critic/explained_variance"] = explained_variance(out_target, values.to(adv.dtype))
    return StepCredit(out_adv.expand(N, T) if width == 1 else out_adv, out_target), metrics


def critic_weights(
    new_logp: Tensor, old_logp: Tensor, token_mask: Tensor, episode: Tensor, n_episodes: int, cap: float
) -> Tensor:
    """PACT's per-step critic weights ``[N]``: ``min(exp(sum of the log-ratios of this step and the
    episode's later steps), cap)`` (``pact_critic_weights`` on the step grid), ``new_logp`` being
    the rollout's tokens scored by the *updated* actor, ``old_logp`` by the one that sampled them."""
    grid = step_grid(episode, n_episodes)
    has = grid >= 0
    step_log_ratio = ((new_logp - old_logp) * token_mask).sum(-1)  # [N]
    r = torch.where(has, step_log_ratio[grid.clamp_min(0)], torch.zeros_like(has, dtype=new_logp.dtype))
    w = pact_critic_weights(r, torch.zeros_like(r), has, cap)
    out = torch.zeros(episode.numel(), dtype=w.dtype, device=w.device)
    out[grid[has]] = w[has]
    return out


@dataclass
class CriticTargets:
    """The critic's regression for one update: ``target`` [N] per step sample, optional per-sample
    ``weights`` [N] (PACT's importance weights), the loss by name in ``CRITIC_LOSSES``."""

    target: Tensor
    loss: str
    weights: Tensor | None = None


def value_credit(
    module: Any, temperature: float, roll: Rollouts, anchors: AnchorStore, cfg: PolicyTrainConfig
) -> tuple[Tensor, dict[str, float], CriticTargets]:
    """Advantages [N, T] from the current critic's values (``module.forward_value``), their metrics
    and the critic's targets; the episode reward is ``value_reward`` (the weighted task components
    plus the anchored preference, or raw with ``value.anchored`` off). Advantages are whitened over
    the batch unless ``advantage.whiten`` is false."""
    with torch.no_grad():
        _, ent, _, raw = module.forward_value(roll.inputs, roll.tokens, temperature)
    bce = cfg.value.critic_loss == "bce"
    CRITIC_LOSSES[cfg.value.critic_loss]  # an unknown name fails before any update
    snap = anchors.snapshot() if cfg.value.anchored else None
    reward, metrics = value_reward(roll.rewards, roll.user, snap, cfg.advantage)
    credit, m = step_credit(
        reward.to(raw.device),
        torch.sigmoid(raw) if bce else raw,
        roll.mask,
        ent,
        roll.episode,
        cfg.value,
        whiten_adv=cfg.advantage.whiten is not False,
    )
    target, tm = critic_target(credit.target, cfg.value.critic_loss)
    return credit.adv.float(), metrics | m | tm, CriticTargets(target.float(), cfg.value.critic_loss)
