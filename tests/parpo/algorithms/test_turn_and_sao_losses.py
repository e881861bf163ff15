"""``turn_ratio`` (MPO) and ``sao_mask`` (SAO) on hand-computed tokens; gradients by autograd."""

from __future__ import annotations

import math

import pytest
import torch

from parpo.algorithms import LOSSES, LossConfig, turn_log_ratio

F64 = torch.float64


def leaf(log_ratios: list[float], old: float = -1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """One row: logp (a leaf) and old_logp with ``logp - old_logp = log_ratios``."""
    old_logp = torch.full((1, len(log_ratios)), old, dtype=F64)
    logp = (old_logp + torch.tensor([log_ratios], dtype=F64)).requires_grad_(True)
    return logp, old_logp


def test_turn_ratio_by_hand() -> None:
    # tokens 0, 1 = turn 0 (log-ratios .1, .3: rho_0 = e^.2 = 1.2214); token 2 an observation
    # (log-ratio 9, ignored); tokens 3, 4 = turn 1 (-.4, -.2: rho_1 = e^-.3 = .7408). eps .2, c = 3.
    #   t0, t1: A = 1, rho 1.2214 > 1.2: l = max(-1.2214, -1.2) = -1.2, clipped, no gradient
    #   t3: A = -1, rho .7408 < .8: l = max(.7408, .8) = .8, clipped, no gradient
    #   t4: A = 2: l = max(-1.4816, -1.6) = -1.4816, gradient -A rho_1 on token 4 only
    logp, old = leaf([0.1, 0.3, 9.0, -0.4, -0.2])
    mask = torch.tensor([[1, 1, 0, 1, 1]], dtype=torch.bool)
    turn = torch.tensor([[0, 0, -1, 1, 1]])
    adv = torch.tensor([[1.0, 1.0, 0.0, -1.0, 2.0]], dtype=F64)
    loss, m = LOSSES["turn_ratio"](logp, old, adv, mask, LossConfig(), n_tokens=4, n_seqs=1, turn=turn)
    rho1 = math.exp(-0.3)
    assert loss.item() == pytest.approx((-1.2 - 1.2 + 0.8 - 2 * rho1) / 4)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([0, 0, 0, 0, -2 * rho1 / 4])
    assert m["pg/clipfrac"] == pytest.approx(3 / 4)
    assert m["pg/ratio_mean"] == pytest.approx((2 * math.exp(0.2) + 2 * rho1) / 4)


def test_turn_log_ratio_value_and_stop_gradient() -> None:
    logp, old = leaf([0.1, 0.3, 9.0, -0.4, -0.2])
    mask = torch.tensor([[1, 1, 0, 1, 1]], dtype=torch.bool)
    lr = turn_log_ratio(logp, old, mask, torch.tensor([[0, 0, 5, 1, 1]]))
    assert lr[0].tolist() == pytest.approx([0.2, 0.2, 0.0, -0.3, -0.3])
    # d(sum_t c_t log rho_t)/d logp_s = c_s: each token's gradient is its own
    (lr * torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]], dtype=F64)).sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([1, 2, 0, 4, 5])
    # turn None: the whole row is one turn (mean of the masked log-ratios: -.2 / 4)
    whole = turn_log_ratio(logp.detach(), old, mask)
    assert whole[0].tolist() == pytest.approx([-0.05, -0.05, 0.0, -0.05, -0.05])


def test_turn_ratio_without_turns_is_one_ratio_per_row() -> None:
    logp, old = leaf([0.1, 0.3, -0.4])
    mask = torch.ones_like(old, dtype=torch.bool)
    adv = torch.tensor([1.0], dtype=F64)
    a, _ = LOSSES["turn_ratio"](logp, old, adv, mask, LossConfig(), n_tokens=3, n_seqs=1)
    b, _ = LOSSES["turn_ratio"](
        logp,
        old,
        adv,
        mask,
        LossConfig(),
        n_tokens=3,
        n_seqs=1,
        turn=torch.zeros_like(mask, dtype=torch.long),
    )
    # mean log-ratio 0: rho = 1 inside the band, l = -A = -1 per token
    assert a.item() == pytest.approx(-1.0) and b.item() == pytest.approx(-1.0)


def test_sao_mask_by_hand() -> None:
    # ratios .7, .9, 1.1, 1.3 with eps .2: only .9 and 1.1 are inside (.8, 1.2); f = r there, 0 elsewhere.
    # l_t = -f A logp_t with logp_t = -1 + ln r_t; gradient -f A. PPO would keep token 0's gradient
    # (A > 0, ratio below the band lowers nothing); SAO masks it.
    ratios = [0.7, 0.9, 1.1, 1.3]
    logp, old = leaf([math.log(r) for r in ratios])
    adv = torch.tensor([[1.0, -1.0, 2.0, 1.0]], dtype=F64)
    mask = torch.ones_like(old, dtype=torch.bool)
    loss, m = LOSSES["sao_mask"](logp, old, adv, mask, LossConfig(), n_tokens=4, n_seqs=1)
    expected = (-(0.9 * -1.0 * (-1 + math.log(0.9))) - 1.1 * 2.0 * (-1 + math.log(1.1))) / 4
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([0.0, 0.9 / 4, -2.2 / 4, 0.0])
    assert m["pg/clipfrac"] == pytest.approx(0.5)


def test_sao_mask_refuses_tis_and_up() -> None:
    logp, old = leaf([0.0])
    args = (logp, old, torch.tensor([1.0], dtype=F64), torch.ones_like(old, dtype=torch.bool))
    with pytest.raises(ValueError, match="rollout log-probs"):
        LOSSES["sao_mask"](*args, LossConfig(tis=True), is_weights=torch.ones_like(old), n_tokens=1, n_seqs=1)
    with pytest.raises(ValueError, match="up off"):
        LOSSES["sao_mask"](*args, LossConfig(up=True), n_tokens=1, n_seqs=1)
