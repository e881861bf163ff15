"""Value-based credit on the LLM backend's token layout: one row per episode (prompt, then per
turn the generated tokens and the tool message after them), the estimators of
``VALUE_ESTIMATORS`` run on it unchanged.

What each estimator's recursion runs over (its ``mask``, the *chain*):

- ``gae``: the episode's span, from its first generated token to its last. Tool-result tokens
  inside are steps of the chain with reward 0 and their own values (token GAE as multi-turn PPO
  implementations run it over the response); their advantages are dropped, as only generated
  tokens are trained. ``gae``'s own rule (a masked token ends the chain) would otherwise cut the
  outcome reward off every turn but the last.
- ``skip_obs_gae``, ``pact``: the generated tokens: tool-result tokens get no advantage and do
  not break the value chain.
- ``turn_gae``: the generated tokens, grouped into turns (``turn_ids``: a turn is one run of
  consecutive generated tokens, the LLM's tool call); its advantage is shared mean-preservingly
  over a turn's tokens, and ``turn_ratio`` takes the same turn ids.

The episode's reward (``value_reward``) sits on its last generated token; the critic's value of
the state before token ``j`` is the head on the hidden state at ``j - 1`` (``value.token_values``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from parpo.algorithms import VALUE_ESTIMATORS, ValueConfig, outcome_rewards, whiten
from parpo.trainer.critic import critic_target, explained_variance


def turn_ids(mask: Tensor) -> Tensor:
    """``[B, L]`` int64: the turn of each generated token (``mask`` [B, L]) counted from 0 along
    its row, a turn being one run of consecutive generated tokens; -1 off the mask."""
    m = mask.bool()
    starts = m & ~torch.nn.functional.pad(m, (1, 0))[:, :-1]
    return torch.where(m, starts.long().cumsum(1) - 1, -1)


def chain_mask(estimator: str, mask: Tensor) -> Tensor:
    """``[B, L]`` bool: the tokens ``estimator``'s recursion runs over (module docstring) for the
    generated tokens ``mask`` [B, L]; the critic's values are needed there."""
    m = mask.bool()
    if estimator != "gae":
        return m
    idx = torch.arange(m.shape[1], device=m.device).expand_as(m)
    first = torch.where(m, idx, m.shape[1]).amin(1, keepdim=True)
    last = torch.where(m, idx, -1).amax(1, keepdim=True)
    return (idx >= first) & (idx <= last)


@dataclass
class TokenCredit:
    """``adv`` [E, L] the actor's advantage on generated tokens (0 elsewhere); ``target`` [E, L]
    the critic's target where ``value_mask`` [E, L] (clamped to ``[0, 1]`` for a BCE critic)."""

    adv: Tensor
    target: Tensor
    value_mask: Tensor


def token_credit(
    reward: Tensor,
    values: Tensor,
    mask: Tensor,
    entropy: Tensor | None,
    cfg: ValueConfig,
    *,
    whiten_adv: bool,
) -> tuple[TokenCredit, dict[str, float]]:
    """Credit of ``E`` episodes: ``reward`` [E] (``value_reward``), ``values`` [E, L] the critic's
    values on the chain (``sigmoid`` of the head for a BCE critic), ``mask`` [E, L] the generated
    tokens, ``entropy`` [E, L] theirs (``turn_gae``'s entropy weights; None without them).
    ``whiten_adv``: whiten the advantages over the batch's generated tokens. Metrics: the estimator's,
    ``critic/explained_variance`` over the value mask, ``critic/target_clamped_frac`` (BCE)."""
    m = mask.bool()
    chain = chain_mask(cfg.estimator, m)
    v = torch.where(chain, values.to(reward.dtype), torch.zeros_like(reward[:, None]))
    credit, metrics = VALUE_ESTIMATORS[cfg.estimator](
        outcome_rewards(reward, chain),
        v,
        chain,
        cfg,
        turn=turn_ids(m),
        entropy=None if entropy is None else entropy.to(reward.dtype),
    )
    adv = torch.where(m, credit.adv, torch.zeros_like(credit.adv))
    if whiten_adv and m.any():
        adv = torch.zeros_like(adv).masked_scatter(m, whiten(adv[m]))
    vm = credit.value_mask
    metrics["critic/explained_variance"] = explained_variance(credit.returns[vm], v[vm])
    fitted, tm = critic_target(credit.returns[vm], cfg.critic_loss)
    target = torch.zeros_like(credit.returns).masked_scatter(vm, fitted)
    return TokenCredit(adv.float(), target.float(), vm), metrics | tm
