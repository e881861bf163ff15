"""Value-based advantage estimators over tokens, registered by name in ``VALUE_ESTIMATORS``.

Every estimator has the signature::

    fn(rewards: Tensor[B, T], values: Tensor[B, T], mask: Tensor[B, T], cfg: ValueConfig, *,
       turn: Tensor[B, T] | None = None, entropy: Tensor[B, T] | None = None)
        -> (Credit(adv[B, T], returns[B, T], value_mask[B, T]), metrics: dict[str, float])

``mask`` is 1 on action tokens (the policy's own) and 0 on observation/tool tokens and padding.
``rewards`` are per token and must be 0 off the mask (an outcome reward sits on the episode's last
action token: ``outcome_rewards``). ``values`` are the critic's values of the state before each
token (for a BCE critic, ``sigmoid`` of its logit); they are treated as constants. ``adv`` is 0 off
the mask; ``returns`` are the critic targets where ``value_mask`` is true (0 elsewhere).

Metrics (floats, never logged here): ``adv/mean``, ``adv/std`` over the action tokens,
``returns/mean`` and ``value/mean`` over ``value_mask``; ``skip_obs_gae`` adds ``gae/lambda_mean``,
``turn_gae`` adds ``turn/count_mean`` (turns per episode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch
from torch import Tensor

from parpo_core.names import NameRegistry

if TYPE_CHECKING:  # annotations only: the config module imports this one to check names
    from parpo.algorithms.config import ValueConfig


class Credit(NamedTuple):
    adv: Tensor  # [B, T] policy advantage, 0 off the action mask
    returns: Tensor  # [B, T] critic target where value_mask
    value_mask: Tensor  # [B, T] bool: the tokens whose values the critic fits


class ValueEstimatorFn(Protocol):
    def __call__(
        self,
        rewards: Tensor,
        values: Tensor,
        mask: Tensor,
        cfg: ValueConfig,
        *,
        turn: Tensor | None = None,
        entropy: Tensor | None = None,
    ) -> tuple[Credit, dict[str, float]]: ...


VALUE_ESTIMATORS: NameRegistry[ValueEstimatorFn] = NameRegistry("value-based advantage estimator")


def outcome_rewards(reward: Tensor, mask: Tensor) -> Tensor:
    """Put one reward per episode ``[B]`` on its last action token: ``[B, T]`` (0 elsewhere).

    An episode with no action token gets nothing (its reward is dropped, as it has no token to credit).
    """
    m = mask.bool()
    last = torch.where(m, torch.arange(m.shape[1], device=m.device), -1).amax(dim=1)  # [B]
    out = torch.zeros(m.shape, dtype=reward.dtype, device=reward.device)
    has = last >= 0
    out[has.nonzero().squeeze(1), last[has]] = reward[has]
    return out


# --------------------------------------------------------------------------- helpers


def _check(rewards: Tensor, values: Tensor, mask: Tensor) -> None:
    if rewards.ndim != 2 or rewards.shape != values.shape or rewards.shape != mask.shape:
        raise ValueError(
            f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and mask {tuple(mask.shape)}"
            " must be equal [B, T]"
        )
    if bool((rewards * (~mask.bool())).ne(0).any()):
        raise ValueError(
            "rewards must be 0 off the action mask (put them on action tokens, e.g. outcome_rewards)"
        )


def _scan(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: Tensor | float, skip: bool
) -> Tensor:
    """GAE ``[B, T]`` by the backward recursion, 0 off the mask.

    ``skip=False``: a masked-out token ends the chain (value 0, advantage 0 behind it), right for
    trailing padding. ``skip=True``: masked-out tokens are skipped, each action token's successor
    is the next action token (SAO's skip-observation GAE). ``lam``: a float or ``[B]``.
    """
    m = mask.bool()
    values = values.detach().to(rewards.dtype)
    lam_b = torch.as_tensor(lam, dtype=rewards.dtype, device=rewards.device).expand(rewards.shape[0])
    adv = torch.zeros_like(rewards)
    zero = torch.zeros_like(rewards[:, 0])
    next_v, next_a = zero, zero
    for t in reversed(range(rewards.shape[1])):
        a = rewards[:, t] + gamma * next_v - values[:, t] + gamma * lam_b * next_a
        adv[:, t] = torch.where(m[:, t], a, zero)
        if skip:
            next_v = torch.where(m[:, t], values[:, t], next_v)
            next_a = torch.where(m[:, t], a, next_a)
        else:
            next_v = torch.where(m[:, t], values[:, t], zero)
            next_a = adv[:, t]
    return adv


def _metrics(credit: Credit, values: Tensor, mask: Tensor) -> dict[str, float]:
    m, vm = mask.bool(), credit.value_mask
    a = credit.adv[m]
    return {
        "adv/mean": a.mean().item() if a.numel() else 0.0,
        "adv/std": a.std(unbiased=False).item() if a.numel() else 0.0,
        "returns/mean": credit.returns[vm].mean().item() if vm.any() else 0.0,
        "value/mean": values.detach()[vm].mean().item() if vm.any() else 0.0,
    }


def _token_credit(adv: Tensor, values: Tensor, mask: Tensor) -> Credit:
    m = mask.bool()
    returns = torch.where(m, adv + values.detach().to(adv.dtype), torch.zeros_like(adv))
    return Credit(adv, returns, m)


# --------------------------------------------------------------------------- estimators


@VALUE_ESTIMATORS.register("gae")
def gae(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    cfg: ValueConfig,
    *,
    turn: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Credit, dict[str, float]]:
    """Token GAE (Schulman et al. 2016): ``delta_t = r_t + gamma V_{t+1} - V_t``,
    ``A_t = delta_t + gamma lambda A_{t+1}``; returns ``A_t + V_t``.

    A masked-out token ends the chain (``V = 0`` and ``A = 0`` there): right for trailing
    padding; multi-turn episodes with observation tokens inside want ``skip_obs_gae``.
    """
    _check(rewards, values, mask)
    credit = _token_credit(_scan(rewards, values, mask, cfg.gamma, cfg.lam, skip=False), values, mask)
    return credit, _metrics(credit, values, mask)


@VALUE_ESTIMATORS.register("skip_obs_gae")
def skip_obs_gae(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    cfg: ValueConfig,
    *,
    turn: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Credit, dict[str, float]]:
    """SAO's skip-observation GAE: the recursion runs over action tokens only, ``t+1`` being the
    next *action* token, so observation/tool tokens get no advantage and do not break the value chain.

    Policy advantage with ``lambda = cfg.lam``, or per episode ``1 - 1/(alpha * n_actions)`` (clipped
    to ``[0, 1]``) when ``cfg.length_alpha`` is set; critic targets ``A^{critic_lam} + V`` (default
    ``critic_lam = 1``: the discounted return over the following action tokens). Equals ``gae``
    when only trailing padding is masked.
    """
    _check(rewards, values, mask)
    lam: Tensor | float = cfg.lam
    if cfg.length_alpha is not None:
        n = mask.bool().sum(dim=1).clamp_min(1).to(rewards.dtype)
        lam = (1.0 - 1.0 / (cfg.length_alpha * n)).clamp(0.0, 1.0)
    adv = _scan(rewards, values, mask, cfg.gamma, lam, skip=True)
    target = _scan(rewards, values, mask, cfg.gamma, cfg.critic_lam, skip=True)
    credit = Credit(adv, _token_credit(target, values, mask).returns, mask.bool())
    metrics = _metrics(credit, values, mask)
    metrics["gae/lambda_mean"] = float(torch.as_tensor(lam).mean())
    return credit, metrics


@VALUE_ESTIMATORS.register("pact")
def pact(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    cfg: ValueConfig,
    *,
    turn: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Credit, dict[str, float]]:
    """PACT's advantage: GAE with ``lambda = 1`` over action tokens (skip-observation chain),
    ``A_t = G_t - V(s_t)`` with ``G_t = sum_k gamma^k r_{t+k}``; critic target ``G_t``.

    ``cfg.lam`` is not used. Fit the critic *after* the actor update with ``CRITIC_LOSSES["bce"]``
    weighted by ``pact_critic_weights`` (the updated actor's importance ratio).
    """
    _check(rewards, values, mask)
    credit = _token_credit(_scan(rewards, values, mask, cfg.gamma, 1.0, skip=True), values, mask)
    return credit, _metrics(credit, values, mask)


def _within_turn_weights(
    m: Tensor, key: Tensor, count: Tensor, entropy: Tensor | None, cfg: ValueConfig
) -> Tensor:
    """Weights ``[n_action_tokens]`` of the tokens ``m`` in their turns ``key``, mean 1 per turn."""
    dt = count.dtype
    u = torch.ones(key.shape, dtype=dt, device=key.device)
    if cfg.token_weights == "entropy":
        if entropy is None or entropy.shape != m.shape:
            raise ValueError(f"token_weights 'entropy' needs entropy shaped like mask {tuple(m.shape)}")
        u = entropy.detach().to(dt)[m]
    if cfg.within_turn_decay != 1.0:
        rank = m.cumsum(dim=1)[m] - 1  # index among the episode's action tokens
        first_rank = torch.full(count.shape, m.shape[1], dtype=rank.dtype, device=key.device)
        first_rank = first_rank.scatter_reduce(0, key, rank, "amin")
        after = count[key] - 1 - (rank - first_rank[key]).to(dt)  # tokens after this one in its turn
        u = u * cfg.within_turn_decay**after
    u_mean = torch.zeros_like(count).index_add_(0, key, u) / count.clamp_min(1)
    return torch.where(u_mean[key] > 0, u / u_mean[key].clamp_min(torch.finfo(dt).tiny), torch.ones_like(u))


@VALUE_ESTIMATORS.register("turn_gae")
def turn_gae(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    cfg: ValueConfig,
    *,
    turn: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Credit, dict[str, float]]:
    """Turn-level GAE (MPO, as specified in issue 23): GAE over the turns ``k`` of each episode.

    ``turn``: ``[B, T]`` turn index of each action token (non-decreasing along the episode's
    action tokens; ignored off the mask). With ``R_k`` the sum of the turn's rewards and ``V_k``
    the value at its first action token::

        delta_k = R_k + gamma V_{k+1} - V_k            (V after the last turn: 0)
        A_k     = sum_j (gamma lambda)^j delta_{k+j}    (cross-turn decay gamma, lambda)
        A_{k,t} = A_k * w_{k,t},   mean_{t in k} w_{k,t} = 1

    ``w`` is ``u / mean_{t in k} u`` with ``u = H_t^[entropy] * decay^(tokens after t in k)``
    (``cfg.token_weights``, ``cfg.within_turn_decay``: the within-turn decay, 1 = uniform); a turn
    whose ``u`` sums to 0 gets ``w = 1``. Critic target ``A_k + V_k`` at each turn's first action
    token (``value_mask``). Every action token its own turn gives ``skip_obs_gae`` with
    ``critic_lam = lam``.
    """
    _check(rewards, values, mask)
    if turn is None or turn.shape != mask.shape:
        raise ValueError(f"turn_gae needs turn ids shaped like mask {tuple(mask.shape)}")
    m = mask.bool()
    B, T = m.shape
    tm = torch.where(m, turn, -1)
    if bool((m & ((turn < 0) | (turn < tm.cummax(dim=1).values))).any()):
        raise ValueError("turn ids must be >= 0 and non-decreasing along each episode's action tokens")
    K = int(tm.max().item()) + 1 if m.any() else 1
    dev, dt = rewards.device, rewards.dtype
    key = (torch.arange(B, device=dev).unsqueeze(1) * K + tm.clamp_min(0))[m]  # flat (episode, turn)
    pos = torch.arange(T, device=dev).expand(B, T)[m]
    count = torch.zeros(B * K, dtype=dt, device=dev).index_add_(0, key, torch.ones_like(pos, dtype=dt))
    turn_r = torch.zeros(B * K, dtype=dt, device=dev).index_add_(0, key, rewards[m])
    first = torch.full((B * K,), T, dtype=pos.dtype, device=dev).scatter_reduce(0, key, pos, "amin")
    present = count > 0
    rows = torch.arange(B * K, device=dev) // K
    turn_v = torch.zeros(B * K, dtype=dt, device=dev)
    turn_v[present] = values.detach().to(dt)[rows[present], first[present]]
    turn_adv = _scan(
        turn_r.view(B, K), turn_v.view(B, K), present.view(B, K), cfg.gamma, cfg.lam, skip=True
    ).flatten()
    w = _within_turn_weights(m, key, count, entropy, cfg)
    adv = torch.zeros_like(rewards)
    adv[m] = turn_adv[key] * w
    value_mask = torch.zeros_like(m)
    value_mask[rows[present], first[present]] = True
    returns = torch.zeros_like(rewards)
    returns[rows[present], first[present]] = turn_adv[present] + turn_v[present]
    credit = Credit(adv, returns, value_mask)
    metrics = _metrics(credit, values, mask)
    metrics["turn/count_mean"] = present.view(B, K).sum(dim=1).to(dt).mean().item()
    return credit, metrics


def compute_credit(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    cfg: ValueConfig,
    *,
    turn: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Credit, dict[str, float]]:
    """Look up ``cfg.estimator`` in ``VALUE_ESTIMATORS`` and call it."""
    return VALUE_ESTIMATORS[cfg.estimator](rewards, values, mask, cfg, turn=turn, entropy=entropy)
