"""Value-based estimators (gae, skip_obs_gae, turn_gae, pact) on a hand-computed 3-turn episode.

The episode (one row, T = 8): turn 0 = action tokens 0, 1; token 2 an observation; turn 1 =
tokens 3, 4; token 5 an observation; turn 2 = token 6; token 7 padding. A -0.2 shaping reward
sits on token 1, the outcome reward 1 on token 6. Values off the action mask are garbage (9) on
purpose: no estimator may read them. The working is in the comments.
"""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from parpo.algorithms import VALUE_ESTIMATORS, ValueConfig, compute_credit, outcome_rewards

F64 = torch.float64
MASK = torch.tensor([[1, 1, 0, 1, 1, 0, 1, 0]], dtype=torch.bool)
VALUES = torch.tensor([[0.5, 0.6, 9.0, 0.4, 0.7, 9.0, 0.8, 9.0]], dtype=F64)
REWARDS = torch.tensor([[0.0, -0.2, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]], dtype=F64)
TURN = torch.tensor([[0, 0, -1, 1, 1, -1, 2, -1]])


def row(*xs: float) -> list[float]:
    return list(xs)


def test_skip_obs_gae_by_hand() -> None:
    # chain 0 -> 1 -> 3 -> 4 -> 6 (gamma 1, lambda .5):
    #   t6: d = 1 - .8 = .2                      A = .2
    #   t4: d = .8 - .7 = .1                     A = .1 + .5 * .2 = .2
    #   t3: d = .7 - .4 = .3                     A = .3 + .5 * .2 = .4
    #   t1: d = -.2 + .4 - .6 = -.4              A = -.4 + .5 * .4 = -.2
    #   t0: d = .6 - .5 = .1                     A = .1 + .5 * -.2 = 0
    # critic targets (lambda 1): the return over the following action tokens: .8 .8 1 1 1
    credit, m = VALUE_ESTIMATORS["skip_obs_gae"](REWARDS, VALUES, MASK, ValueConfig(lam=0.5))
    assert credit.adv[0].tolist() == pytest.approx(row(0, -0.2, 0, 0.4, 0.2, 0, 0.2, 0))
    assert credit.returns[0].tolist() == pytest.approx(row(0.8, 0.8, 0, 1, 1, 0, 1, 0))
    assert credit.value_mask.equal(MASK)
    assert m["adv/mean"] == pytest.approx(0.6 / 5) and m["gae/lambda_mean"] == pytest.approx(0.5)
    assert m["returns/mean"] == pytest.approx(4.6 / 5) and m["value/mean"] == pytest.approx(3.0 / 5)


def test_plain_gae_breaks_the_chain_at_observation_tokens() -> None:
    # a masked token has value 0 and advantage 0 behind it:
    #   t6: .2;  t4: d = 0 - .7 -> -.7;  t3: .3 + .5 * -.7 = -.05
    #   t1: d = -.2 + 0 - .6 = -.8;  t0: .1 + .5 * -.8 = -.3
    credit, _ = VALUE_ESTIMATORS["gae"](REWARDS, VALUES, MASK, ValueConfig(lam=0.5))
    assert credit.adv[0].tolist() == pytest.approx(row(-0.3, -0.8, 0, -0.05, -0.7, 0, 0.2, 0))
    assert credit.returns[0].tolist() == pytest.approx(row(0.2, -0.2, 0, 0.35, 0, 0, 1, 0))


def test_turn_gae_by_hand() -> None:
    # turns: R = (-.2, 0, 1), V at first tokens (0, 3, 6) = (.5, .4, .8); gamma 1, lambda .5
    #   k2: d = 1 - .8 = .2                      A = .2
    #   k1: d = .8 - .4 = .4                     A = .4 + .5 * .2 = .5
    #   k0: d = -.2 + .4 - .5 = -.3              A = -.3 + .5 * .5 = -.05
    cfg = ValueConfig(estimator="turn_gae", lam=0.5)
    credit, m = compute_credit(REWARDS, VALUES, MASK, cfg, turn=TURN)
    assert credit.adv[0].tolist() == pytest.approx(row(-0.05, -0.05, 0, 0.5, 0.5, 0, 0.2, 0))
    assert credit.value_mask[0].tolist() == [True, False, False, True, False, False, True, False]
    assert credit.returns[0].tolist() == pytest.approx(row(0.45, 0, 0, 0.9, 0, 0, 1.0, 0))
    assert m["turn/count_mean"] == 3.0
    # entropy weights: turn 0 entropies (1, 3) -> w = (.5, 1.5); turn 1 (2, 2) -> 1, 1; turn 2 -> 1
    ent = torch.tensor([[1.0, 3.0, 7.0, 2.0, 2.0, 7.0, 5.0, 7.0]], dtype=F64)
    credit, _ = compute_credit(
        REWARDS, VALUES, MASK, cfg.model_copy(update={"token_weights": "entropy"}), turn=TURN, entropy=ent
    )
    assert credit.adv[0].tolist() == pytest.approx(row(-0.025, -0.075, 0, 0.5, 0.5, 0, 0.2, 0))
    # within-turn decay .5: u = (.5, 1) in turns 0 and 1 (mean .75) -> w = (2/3, 4/3)
    credit, _ = compute_credit(
        REWARDS, VALUES, MASK, cfg.model_copy(update={"within_turn_decay": 0.5}), turn=TURN
    )
    assert credit.adv[0].tolist() == pytest.approx(
        row(-0.05 * 2 / 3, -0.05 * 4 / 3, 0, 0.5 * 2 / 3, 0.5 * 4 / 3, 0, 0.2, 0)
    )
    # a turn whose entropies are all 0 keeps uniform weights
    credit, _ = compute_credit(
        REWARDS,
        VALUES,
        MASK,
        cfg.model_copy(update={"token_weights": "entropy"}),
        turn=TURN,
        entropy=torch.zeros_like(ent),
    )
    assert credit.adv[0].tolist() == pytest.approx(row(-0.05, -0.05, 0, 0.5, 0.5, 0, 0.2, 0))


def test_turn_gae_weights_keep_each_turns_mean_advantage() -> None:
    g = torch.Generator().manual_seed(0)
    ent = torch.rand(MASK.shape, generator=g, dtype=F64)
    cfg = ValueConfig(estimator="turn_gae", lam=0.5, token_weights="entropy", within_turn_decay=0.7)
    credit, _ = compute_credit(REWARDS, VALUES, MASK, cfg, turn=TURN, entropy=ent)
    a = credit.adv[0]
    assert [a[[0, 1]].mean().item(), a[[3, 4]].mean().item(), a[6].item()] == pytest.approx([-0.05, 0.5, 0.2])


def test_turn_gae_with_one_token_turns_is_skip_obs_gae() -> None:
    g = torch.Generator().manual_seed(1)
    mask = torch.rand(3, 9, generator=g) > 0.3
    rewards = torch.randn(3, 9, generator=g, dtype=F64) * mask
    values = torch.randn(3, 9, generator=g, dtype=F64)
    cfg = ValueConfig(gamma=0.9, lam=0.7, critic_lam=0.7)
    turn = torch.arange(9).expand(3, 9)
    by_turn, _ = VALUE_ESTIMATORS["turn_gae"](rewards, values, mask, cfg, turn=turn)
    by_token, _ = VALUE_ESTIMATORS["skip_obs_gae"](rewards, values, mask, cfg)
    torch.testing.assert_close(by_turn.adv, by_token.adv)
    torch.testing.assert_close(by_turn.returns, by_token.returns)
    # one turn: every token gets R - V(first token)
    one, _ = VALUE_ESTIMATORS["turn_gae"](REWARDS, VALUES, MASK, cfg, turn=torch.zeros_like(TURN))
    assert one.adv[0].tolist() == pytest.approx(row(0.3, 0.3, 0, 0.3, 0.3, 0, 0.3, 0))


def test_skip_obs_gae_is_gae_when_only_padding_is_masked() -> None:
    g = torch.Generator().manual_seed(2)
    lengths = torch.tensor([7, 3, 1, 0])
    mask = torch.arange(7).expand(4, 7) < lengths.unsqueeze(1)
    rewards = torch.randn(4, 7, generator=g, dtype=F64) * mask
    values = torch.randn(4, 7, generator=g, dtype=F64)
    cfg = ValueConfig(gamma=0.9, lam=0.8, critic_lam=0.8)
    skip, _ = VALUE_ESTIMATORS["skip_obs_gae"](rewards, values, mask, cfg)
    plain, _ = VALUE_ESTIMATORS["gae"](rewards, values, mask, cfg)
    torch.testing.assert_close(skip.adv, plain.adv)
    torch.testing.assert_close(skip.returns, plain.returns)
    assert skip.adv[3].abs().sum() == 0


def test_pact_is_discounted_return_minus_value() -> None:
    # gamma .9 along 0 -> 1 -> 3 -> 4 -> 6: G6 = 1, G4 = .9, G3 = .81, G1 = -.2 + .9 * .81 = .529,
    # G0 = .9 * .529 = .4761
    credit, _ = VALUE_ESTIMATORS["pact"](REWARDS, VALUES, MASK, ValueConfig(gamma=0.9, lam=0.3))
    g = row(0.4761, 0.529, 0, 0.81, 0.9, 0, 1.0, 0)
    assert credit.returns[0].tolist() == pytest.approx(g)
    v = row(0.5, 0.6, 0, 0.4, 0.7, 0, 0.8, 0)
    assert credit.adv[0].tolist() == pytest.approx([a - b for a, b in zip(g, v, strict=True)])
    # lambda = 1 GAE is the same thing where nothing inside the episode is masked
    full = torch.ones_like(MASK)
    r = torch.zeros_like(REWARDS)
    r[0, 7] = 1.0
    plain, _ = VALUE_ESTIMATORS["gae"](r, VALUES, full, ValueConfig(gamma=0.9, lam=1.0))
    pact, _ = VALUE_ESTIMATORS["pact"](r, VALUES, full, ValueConfig(gamma=0.9))
    torch.testing.assert_close(plain.adv, pact.adv)
    assert pact.returns[0].tolist() == pytest.approx([0.9**k for k in range(7, -1, -1)])


def test_length_adaptive_lambda() -> None:
    # 5 action tokens, alpha 1.5: lambda = 1 - 1 / 7.5
    lam = 1 - 1 / 7.5
    credit, m = VALUE_ESTIMATORS["skip_obs_gae"](REWARDS, VALUES, MASK, ValueConfig(length_alpha=1.5))
    fixed, _ = VALUE_ESTIMATORS["skip_obs_gae"](REWARDS, VALUES, MASK, ValueConfig(lam=lam))
    assert m["gae/lambda_mean"] == pytest.approx(lam)
    torch.testing.assert_close(credit.adv, fixed.adv)
    # t6 .2; t4 .1 + lam * .2
    assert credit.adv[0, 4].item() == pytest.approx(0.1 + lam * 0.2)


def test_outcome_rewards_sit_on_the_last_action_token() -> None:
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0]], dtype=torch.bool)
    out = outcome_rewards(torch.tensor([0.7, 2.0]), mask)
    assert out.tolist() == [[0, 0, 0, pytest.approx(0.7), 0], [0, 0, 0, 0, 0]]


def test_bad_inputs_are_one_line_errors() -> None:
    off = REWARDS.clone()
    off[0, 2] = 1.0
    with pytest.raises(ValueError, match="0 off the action mask"):
        VALUE_ESTIMATORS["gae"](off, VALUES, MASK, ValueConfig())
    with pytest.raises(ValueError, match="must be equal"):
        VALUE_ESTIMATORS["gae"](REWARDS[:, :4], VALUES, MASK, ValueConfig())
    with pytest.raises(ValueError, match="needs turn ids"):
        VALUE_ESTIMATORS["turn_gae"](REWARDS, VALUES, MASK, ValueConfig())
    with pytest.raises(ValueError, match="non-decreasing"):
        VALUE_ESTIMATORS["turn_gae"](REWARDS, VALUES, MASK, ValueConfig(), turn=TURN.flip(1))
    with pytest.raises(ValueError, match="needs entropy"):
        VALUE_ESTIMATORS["turn_gae"](REWARDS, VALUES, MASK, ValueConfig(token_weights="entropy"), turn=TURN)
    with pytest.raises(ValidationError):
        ValueConfig(lam=1.5)


def test_turn_gae_rows_are_independent() -> None:
    # the hand-computed episode next to a 2-turn one (turns 0 and 3: ids need not be dense)
    mask = torch.cat([MASK, torch.tensor([[0, 1, 1, 0, 1, 0, 0, 0]], dtype=torch.bool)])
    values = torch.cat([VALUES, torch.tensor([[9.0, 0.2, 0.1, 9.0, 0.5, 9.0, 9.0, 9.0]], dtype=F64)])
    rewards = torch.cat([REWARDS, torch.tensor([[0, 0, 0, 0, 1.0, 0, 0, 0]], dtype=F64)])
    turn = torch.cat([TURN, torch.tensor([[-1, 0, 0, -1, 3, -1, -1, -1]])])
    credit, m = VALUE_ESTIMATORS["turn_gae"](rewards, values, mask, ValueConfig(lam=0.5), turn=turn)
    # row 1: k3: d = 1 - .5 = .5, A = .5; k0: d = .5 - .2 = .3, A = .3 + .5 * .5 = .55
    assert credit.adv[0].tolist() == pytest.approx(row(-0.05, -0.05, 0, 0.5, 0.5, 0, 0.2, 0))
    assert credit.adv[1].tolist() == pytest.approx(row(0, 0.55, 0.55, 0, 0.5, 0, 0, 0))
    assert credit.returns[1].tolist() == pytest.approx(row(0, 0.75, 0, 0, 1.0, 0, 0, 0))
    assert m["turn/count_mean"] == 2.5
