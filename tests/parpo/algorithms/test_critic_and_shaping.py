"""Critic losses, PACT's importance weights (actor-then-critic) and the clipped shaping penalties."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from parpo.algorithms import (
    ADVANTAGES,
    CRITIC_LOSSES,
    INVALID_CALL,
    OVERLONG,
    AdvantageConfig,
    ShapingConfig,
    pact_critic_weights,
    shaping_rewards,
)

F64 = torch.float64


def test_mse_and_bce_by_hand() -> None:
    pred = torch.tensor([[1.0, 2.0, 5.0]], dtype=F64, requires_grad=True)
    target = torch.tensor([[0.0, 2.5, 99.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    loss, m = CRITIC_LOSSES["mse"](pred, target, mask, n_tokens=2)
    assert loss.item() == pytest.approx((0.5 * 1 + 0.5 * 0.25) / 2) and m["critic/loss"] == loss.item()
    # logit 0 (s = .5) against R = 1: -log .5; logit ln 3 (s = .75) against R = .25:
    # -(.25 log .75 + .75 log .25); the third token is off the mask (its target would be invalid)
    logit = torch.tensor([[0.0, math.log(3.0), 0.0]], dtype=F64, requires_grad=True)
    r = torch.tensor([[1.0, 0.25, 7.0]], dtype=F64)
    loss, _ = CRITIC_LOSSES["bce"](logit, r, mask, n_tokens=2)
    assert loss.item() == pytest.approx((math.log(2) - 0.25 * math.log(0.75) - 0.75 * math.log(0.25)) / 2)
    loss.backward()  # d/dv = s(v) - R
    assert logit.grad[0].tolist() == pytest.approx([(0.5 - 1) / 2, (0.75 - 0.25) / 2, 0.0])
    with pytest.raises(ValueError, match=r"returns in \[0, 1\]"):
        CRITIC_LOSSES["bce"](logit, r, torch.ones_like(mask), n_tokens=3)


def test_pact_weights_are_the_tail_ratio_of_the_updated_actor() -> None:
    # log-ratios .1, -.3, (observation 5, ignored), .2: tails .0, -.1, -, .2
    old = torch.zeros(1, 4, dtype=F64)
    new = torch.tensor([[0.1, -0.3, 5.0, 0.2]], dtype=F64)
    mask = torch.tensor([[1, 1, 0, 1]], dtype=torch.bool)
    w = pact_critic_weights(new, old, mask)
    assert w[0].tolist() == pytest.approx([1.0, math.exp(-0.1), 0.0, math.exp(0.2)])
    assert pact_critic_weights(new, old, mask, cap=1.1)[0, 3].item() == pytest.approx(1.1)
    assert pact_critic_weights(old, old, mask)[0].tolist() == [1.0, 1.0, 0.0, 1.0]


def test_actor_then_critic_fits_the_updated_actors_value() -> None:
    # One-step bandit: actions 0 (R = 1) and 1 (R = 0), both sampled under pi_old = (.5, .5).
    # After the actor update pi_new = (.8, .2). Weighted BCE has its minimum where
    # sum_i w_i (s(v) - R_i) = 0, i.e. s(v) = sum w R / sum w = 1.6 / 2 = .8 = V under pi_new;
    # unweighted it stays at .5 = V under pi_old.
    old = torch.log(torch.tensor([[0.5], [0.5]], dtype=F64))
    new = torch.log(torch.tensor([[0.8], [0.2]], dtype=F64))
    mask = torch.ones(2, 1, dtype=torch.bool)
    r = torch.tensor([[1.0], [0.0]], dtype=F64)
    w = pact_critic_weights(new, old, mask)
    assert w.flatten().tolist() == pytest.approx([1.6, 0.4])

    def grad_at(p: float, weights: torch.Tensor | None) -> float:
        v = torch.full((2, 1), math.log(p / (1 - p)), dtype=F64, requires_grad=True)
        loss, _ = CRITIC_LOSSES["bce"](v, r, mask, weights=weights, n_tokens=2)
        loss.backward()
        return v.grad.sum().item()

    assert grad_at(0.8, w) == pytest.approx(0.0, abs=1e-12)
    assert grad_at(0.5, None) == pytest.approx(0.0, abs=1e-12)
    assert grad_at(0.5, w) < 0  # the updated actor's value is higher: the critic moves up


def test_shaping_penalties_are_clipped() -> None:
    # L0 = 10 - 4 = 6: over = (0, 0, .5, 1, 3.5) -> -.25 * over = (0, 0, -.125, -.25, -.875 -> -.25)
    # invalid: -.1 * (0, 1, 2, 3, 10) = (0, -.1, -.2, -.3 -> -.25, -1 -> -.25)
    cfg = ShapingConfig(max_len=10, len_buffer=4)
    out = shaping_rewards(torch.tensor([5, 6, 8, 10, 20]), torch.tensor([0, 1, 2, 3, 10]), cfg)
    assert out[OVERLONG].tolist() == pytest.approx([0, 0, -0.125, -0.25, -0.25])
    assert out[INVALID_CALL].tolist() == pytest.approx([0, -0.1, -0.2, -0.25, -0.25])
    tight = shaping_rewards(
        torch.tensor([8]), torch.tensor([1]), cfg.model_copy(update={"clip": (-0.05, 0.25)})
    )
    assert tight[OVERLONG].item() == pytest.approx(-0.05) and tight[INVALID_CALL].item() == pytest.approx(
        -0.05
    )
    assert set(shaping_rewards(torch.tensor([50]), torch.tensor([0]), ShapingConfig())) == {INVALID_CALL}
    with pytest.raises(ValidationError):
        ShapingConfig(clip=(0.1, -0.1))
    with pytest.raises(ValueError, match="must be equal"):
        shaping_rewards(torch.tensor([1, 2]), torch.tensor([0]), cfg)


def test_a_shaping_penalty_joins_the_advantage_as_a_task_component() -> None:
    # one group of two rollouts with equal task reward; the second made one invalid call
    pen = shaping_rewards(torch.tensor([3, 3]), torch.tensor([0, 1]), ShapingConfig())
    rewards = {"task/quality": torch.tensor([1.0, 1.0]), INVALID_CALL: pen[INVALID_CALL]}
    adv, m = ADVANTAGES["grpo"](
        rewards, torch.zeros(2), torch.zeros(2, dtype=torch.long), None, AdvantageConfig()
    )
    # total (1, .9): mean .95, std .05 -> A = (+1, -1) (up to eps)
    assert adv.tolist() == pytest.approx([1.0, -1.0], abs=1e-4)
    assert m[f"{INVALID_CALL}/frac_zero_std"] == 0.0
