"""Value-based credit on the native policy's step samples, worked out by hand: the episodes x steps
grid, GAE / PACT / turn GAE per step, PACT's per-step critic weights, the PARPO value reward
(anchored preference; anchors off = the plain estimator), and the config that selects them."""

from __future__ import annotations

import math

import pytest
import torch

from parpo.algorithms import (
    VALUE_ESTIMATORS,
    AdvantageConfig,
    AnchorSnapshot,
    ValueConfig,
    outcome_rewards,
    value_reward,
)
from parpo.trainer.critic import critic_weights, step_credit, step_grid

F64 = torch.float64
# Samples in collect's order (step after step): A0, B0, A1. Episode A has two steps, B one.
EPISODE = torch.tensor([0, 1, 0])
VALUES = torch.tensor([0.2, 0.4, 0.5], dtype=F64)  # V(A0), V(B0), V(A1)
REWARD = torch.tensor([1.0, 0.0], dtype=F64)  # A, B
T = 3
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.bool)  # each step's policy tokens
ENT = torch.tensor([[1.0, 3.0, 0.0], [2.0, 0.0, 0.0], [1.0, 1.0, 4.0]], dtype=F64)


def _credit(cfg: ValueConfig, *, whiten_adv: bool = False):
    return step_credit(REWARD, VALUES, MASK, ENT, EPISODE, cfg, whiten_adv=whiten_adv)


def test_step_grid_lays_samples_out_by_episode_and_step() -> None:
    assert step_grid(torch.tensor([0, 1, 0, 2, 0]), 3).tolist() == [[0, 2, 4], [1, -1, -1], [3, -1, -1]]
    assert step_grid(EPISODE, 2).tolist() == [[0, 2], [1, -1]]


def test_gae_per_step_by_hand() -> None:
    # A: delta_1 = 1 - .5 = .5 = A_1; delta_0 = 0 + .5 - .2 = .3, A_0 = .3 + .5 * .5 = .55.
    # B: A = 0 - .4. Targets A + V: .75, 1.0, 0.0. Every token of a step carries its advantage.
    credit, m = _credit(ValueConfig(estimator="gae", gamma=1.0, lam=0.5))
    assert credit.adv.shape == (3, T)
    assert credit.adv[:, 0].tolist() == pytest.approx([0.55, -0.4, 0.5])
    assert (credit.adv == credit.adv[:, :1]).all()
    assert credit.target.tolist() == pytest.approx([0.75, 0.0, 1.0])
    # explained variance: targets (.75, 0, 1), residuals (.55, -.4, .5)
    t, r = torch.tensor([0.75, 0.0, 1.0]), torch.tensor([0.55, -0.4, 0.5])
    assert m["critic/explained_variance"] == pytest.approx(1 - r.var(unbiased=False) / t.var(unbiased=False))


def test_pact_is_return_minus_value_with_return_targets() -> None:
    credit, _ = _credit(ValueConfig(estimator="pact", gamma=1.0))
    assert credit.adv[:, 0].tolist() == pytest.approx([1 - 0.2, 0 - 0.4, 1 - 0.5])
    assert credit.target.tolist() == pytest.approx([1.0, 0.0, 1.0])
    # discounted: G_A0 = gamma * 1
    credit, _ = _credit(ValueConfig(estimator="pact", gamma=0.9))
    assert credit.adv[:, 0].tolist() == pytest.approx([0.9 - 0.2, -0.4, 1 - 0.5])


def test_turn_gae_with_uniform_weights_is_step_gae_on_every_policy_token() -> None:
    cfg = dict(gamma=1.0, lam=0.5)
    turn, _ = _credit(ValueConfig(estimator="turn_gae", **cfg))
    step, _ = _credit(ValueConfig(estimator="gae", **cfg))
    torch.testing.assert_close(turn.adv, torch.where(MASK, step.adv, torch.zeros_like(step.adv)))
    torch.testing.assert_close(turn.target, step.target)


def test_turn_gae_entropy_weights_share_a_steps_credit_with_mean_one() -> None:
    credit, m = _credit(ValueConfig(estimator="turn_gae", gamma=1.0, lam=0.5, token_weights="entropy"))
    # A0: entropies (1, 3) -> weights (.5, 1.5) of .55; B0: one token; A1: (1, 1, 4) -> (.5, .5, 2) of .5
    expect = torch.tensor([[0.275, 0.825, 0.0], [-0.4, 0.0, 0.0], [0.25, 0.25, 1.0]], dtype=F64)
    torch.testing.assert_close(credit.adv, expect)
    assert m["turn/count_mean"] == pytest.approx(1.5)


def test_whitened_advantages_have_mean_zero_over_the_steps() -> None:
    credit, _ = _credit(ValueConfig(estimator="gae", lam=0.5), whiten_adv=True)
    a = torch.tensor([0.55, -0.4, 0.5])
    torch.testing.assert_close(
        credit.adv[:, 0], ((a - a.mean()) / (a.std(unbiased=False) + 1e-6)).to(F64), rtol=1e-6, atol=1e-6
    )


def test_pact_critic_weights_use_this_and_later_steps_log_ratios() -> None:
    old = torch.zeros(3, T, dtype=F64)
    new = torch.tensor([[0.05, 0.05, 9.0], [0.3, 0.0, 0.0], [-0.1, -0.1, -0.1]], dtype=F64)
    w = critic_weights(new, old, MASK, EPISODE, 2, cap=2.0)
    # A0: its tokens (.1; the third is off the mask) and A1's (-.3); B0: .3; A1: -.3
    assert w.tolist() == pytest.approx([math.exp(-0.2), math.exp(0.3), math.exp(-0.3)])
    assert critic_weights(new * 10, old, MASK, EPISODE, 2, cap=2.0)[1].item() == 2.0


# --------------------------------------------------------------------------- the PARPO value reward

CFG = AdvantageConfig(weights={"task/a": 0.5, "preference": 1.0})
USER = torch.tensor([0, 1])
REWARDS = {"task/a": torch.tensor([1.0, 0.0], dtype=F64), "preference": torch.tensor([0.7, 0.7], dtype=F64)}
# user 0: mu .5, sigma .2, ready (3 updates); user 1: not ready yet (2 updates)
SNAP = AnchorSnapshot.from_lists([0.5, 0.5], [0.04, 0.04], [3, 2])


def test_value_reward_anchors_the_preference_by_hand() -> None:
    r, m = value_reward(REWARDS, USER, SNAP, CFG)
    # user 0: b = .5 - .2 = .3, s = max(.2, .1 * .7) = .2 -> (.7 - .3) / .2 = 2; R = .5 * 1 + 2
    # user 1: raw preference; R = 0 + .7
    assert r.tolist() == pytest.approx([2.5, 0.7], abs=1e-5)
    assert m["preference/frac_anchored"] == 0.5


@pytest.mark.parametrize("estimator", ["gae", "turn_gae", "skip_obs_gae", "pact"])
def test_with_anchors_off_each_estimator_is_its_plain_form(estimator: str) -> None:
    """Anchors off: the reward is the plain weighted sum, and the credit equals the registered
    estimator run by hand on the episodes x steps grid with the outcome on the last step."""
    r, m = value_reward(REWARDS, USER, None, CFG)
    assert r.tolist() == pytest.approx([0.5 + 0.7, 0.7]) and m["preference/frac_anchored"] == 0.0
    cfg = ValueConfig(estimator=estimator, lam=0.5, length_alpha=1.5 if estimator == "skip_obs_gae" else None)
    credit, _ = step_credit(r, VALUES, MASK, ENT, EPISODE, cfg, whiten_adv=False)
    if estimator == "turn_gae":
        mask = torch.tensor([[1, 1, 0, 1, 1, 1], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
        vals = torch.tensor([[0.2] * 3 + [0.5] * 3, [0.4] * 3 + [0.0] * 3], dtype=F64)
        turn = torch.tensor([[0, 0, 0, 1, 1, 1]] * 2)
        plain, _ = VALUE_ESTIMATORS[estimator](outcome_rewards(r, mask), vals * mask, mask, cfg, turn=turn)
        expect = torch.stack([plain.adv[0, :3], plain.adv[1, :3], plain.adv[0, 3:]])
    else:
        mask = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
        vals = torch.tensor([[0.2, 0.5], [0.4, 0.0]], dtype=F64)
        plain, _ = VALUE_ESTIMATORS[estimator](outcome_rewards(r, mask), vals, mask, cfg)
        expect = torch.stack([plain.adv[0, 0], plain.adv[1, 0], plain.adv[0, 1]]).unsqueeze(1).expand(3, T)
    torch.testing.assert_close(credit.adv, expect)
    # and with ready anchors the preference moves off its raw value
    anchored, _ = value_reward(REWARDS, USER, SNAP, CFG)
    assert anchored[0] != r[0] and anchored[1] == r[1]


# --------------------------------------------------------------------------- config and --algo


def _load(*overrides: str):
    from parpo.presets import load
    from parpo.trainer.config import PolicyTrainConfig

    return load(PolicyTrainConfig, "policy", "default", list(overrides))


def test_a_value_estimator_name_selects_the_critic_and_the_value_head() -> None:
    from parpo.cli.policy import load_config

    cfg = load_config("default", "pact", None, ["value.critic_loss=bce"])
    assert cfg.value_based and cfg.value.estimator == "pact" and cfg.policy.value_head
    assert cfg.value.critic_loss == "bce"
    plain = _load()
    assert not plain.value_based and not plain.policy.value_head


def test_value_config_mistakes_are_one_line_errors() -> None:
    from parpo.cli.policy import load_config
    from parpo_core.errors import UserError

    with pytest.raises(UserError, match=r"unknown advantage estimator 'pac' \(did you mean 'pact'\?\)"):
        load_config("default", "pac", None, [])
    with pytest.raises(UserError, match="train.order actor_then_critic fits a critic"):
        _load("train.order=actor_then_critic")
    with pytest.raises(UserError, match="value.estimator .gae. differs from advantage.estimator .pact."):
        _load("advantage.estimator=pact", "value.estimator=gae")


def test_shaping_components_get_a_weight_next_to_explicit_weights() -> None:
    cfg = _load("shaping.max_len=4", "shaping.len_buffer=2")
    assert cfg.advantage.weights["task/overlong"] == 1.0 and cfg.advantage.weights["task/invalid_call"] == 1.0
    assert cfg.advantage.weights["preference"] == 1.0  # the preset's own weights stay


def test_shaping_components_from_episode_infos() -> None:
    from parpo.algorithms import ShapingConfig
    from parpo.trainer.rollout import shaping_components

    infos = [{"steps": 2, "invalid": []}, {"steps": 3, "invalid": ["x"]}, {"steps": 4, "invalid": ["x"] * 5}]
    out = shaping_components(infos, ShapingConfig(max_len=4, len_buffer=2))
    # over-long ramp from 2 steps: 0, -.125, -.25; invalid: 0, -.1, -.5 clipped to -.25
    assert out["task/overlong"].tolist() == pytest.approx([0.0, -0.125, -0.25])
    assert out["task/invalid_call"].tolist() == pytest.approx([0.0, -0.1, -0.25])
