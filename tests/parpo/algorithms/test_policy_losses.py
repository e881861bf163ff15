"""PPO loss on hand-computed tokens; UP and TIS gradients by autograd on two-token examples."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from parpo.algorithms import LOSSES, LossConfig, compute_loss, tis_weights

F64 = torch.float64


def tokens(ratios: list[float], old: float = -1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, 1]`` logp (a leaf) and old_logp with ``exp(logp - old_logp) = ratio``."""
    old_logp = torch.full((len(ratios), 1), old, dtype=F64)
    logp = (old_logp + torch.log(torch.tensor(ratios, dtype=F64)).unsqueeze(1)).requires_grad_(True)
    return logp, old_logp


def test_ppo_asymmetric_and_dual_clip_by_hand() -> None:
    cfg = LossConfig(clip_eps_low=0.2, clip_eps_high=0.3, dual_clip_c=3.0)
    # one token per sequence; adv [B] is broadcast over tokens
    #   A=+1 rho=1.5: max(-1.5, -1.3) = -1.3 (clipped above 1.3, no gradient)
    #   A=+1 rho=0.5: max(-0.5, -0.8) = -0.5 (not clipped: gradient -rho = -.5)
    #   A=-1 rho=0.5: max(0.5, 0.8)  = 0.8  (clipped below 0.8, no gradient)
    #   A=-1 rho=5.0: max(5, 1.3) = 5 -> dual clip min(5, 3) = 3 (no gradient)
    #   A=-1 rho=2.0: max(2, 1.3) = 2, min(2, 3) = 2 (gradient +rho = 2)
    logp, old = tokens([1.5, 0.5, 0.5, 5.0, 2.0])
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0], dtype=F64)
    mask = torch.ones_like(old)
    loss, m = LOSSES["ppo"](logp, old, adv, mask, cfg, n_tokens=5, n_seqs=5)
    assert loss.item() == pytest.approx((-1.3 - 0.5 + 0.8 + 3.0 + 2.0) / 5)
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, -0.5 / 5, 0.0, 0.0, 2.0 / 5])
    assert m["pg/clipfrac"] == pytest.approx(2 / 5) and m["pg/dual_clipfrac"] == pytest.approx(1 / 5)
    assert m["pg/ratio_mean"] == pytest.approx((1.5 + 0.5 + 0.5 + 5 + 2) / 5)


def test_without_dual_clip_negative_advantage_is_unbounded() -> None:
    logp, old = tokens([5.0])
    loss, _ = LOSSES["ppo"](
        logp,
        old,
        torch.tensor([-1.0], dtype=F64),
        torch.ones_like(old),
        LossConfig(dual_clip_c=None),
        n_tokens=1,
        n_seqs=1,
    )
    assert loss.item() == pytest.approx(5.0)


def test_up_variant_gradients_on_two_tokens() -> None:
    # token 1: A=+2, rho=1.5 (outside 1 + .2); token 2: A=-1, rho=1.1 (inside the clip range)
    adv = torch.tensor([2.0, -1.0], dtype=F64)
    # plain PPO: token 1 -> -2 * 1.2 = -2.4, clipped, gradient 0; token 2 -> 1.1, gradient -A rho = 1.1
    logp, old = tokens([1.5, 1.1])
    loss, m = LOSSES["ppo"](logp, old, adv, torch.ones_like(old), LossConfig(), n_tokens=2, n_seqs=2)
    loss.backward()
    assert loss.item() == pytest.approx((-2.4 + 1.1) / 2)
    assert logp.grad.flatten().tolist() == pytest.approx([0.0, 1.1 / 2])
    assert m["pg/clipfrac"] == 0.5
    # UP: token 1 -> -A pi/sg(pi) = -2 (value), gradient -A = -2; token 2 unchanged (clipped PPO)
    logp, old = tokens([1.5, 1.1])
    loss, m = LOSSES["ppo"](logp, old, adv, torch.ones_like(old), LossConfig(up=True), n_tokens=2, n_seqs=2)
    loss.backward()
    assert loss.item() == pytest.approx((-2.0 + 1.1) / 2)
    assert logp.grad.flatten().tolist() == pytest.approx([-2.0 / 2, 1.1 / 2])
    assert m["pg/clipfrac"] == 0.0
    # UP keeps clipping negatives: A=-1, rho=0.5 is clipped to 0.8 with no gradient
    logp, old = tokens([0.5])
    loss, _ = LOSSES["ppo"](
        logp, old, adv[1:], torch.ones_like(old), LossConfig(up=True), n_tokens=1, n_seqs=1
    )
    loss.backward()
    assert loss.item() == pytest.approx(0.8) and logp.grad.item() == 0.0


def test_tis_gradients_on_two_tokens() -> None:
    # rho = 1 on both tokens, A = +1: per-token loss -1; raw IS weights [3, .5] -> clipped [2, .5]
    # loss = (-2 - .5) / 2 = -1.25; d/dlogp = -A rho w / 2 = [-1, -.25]; no gradient into the weights
    logp, old = tokens([1.0, 1.0])
    w = torch.tensor([[3.0], [0.5]], dtype=F64, requires_grad=True)
    adv = torch.tensor([1.0, 1.0], dtype=F64)
    loss, m = LOSSES["ppo"](
        logp, old, adv, torch.ones_like(old), LossConfig(tis=True), is_weights=w, n_tokens=2, n_seqs=2
    )
    loss.backward()
    assert loss.item() == pytest.approx(-1.25)
    assert logp.grad.flatten().tolist() == pytest.approx([-1.0, -0.25])
    assert w.grad is None
    assert m["tis/mean"] == pytest.approx(1.25) and m["tis/capped_frac"] == 0.5


def test_tis_weights_helper() -> None:
    old = torch.log(torch.tensor([[0.5, 0.2]]))
    rollout = torch.log(torch.tensor([[0.1, 0.4]]))
    assert tis_weights(old, rollout).flatten().tolist() == pytest.approx([2.0, 0.5])  # 5 -> capped at 2
    assert tis_weights(old, rollout, cap=10.0).flatten().tolist() == pytest.approx([5.0, 0.5])


def test_tis_misconfiguration_is_an_error() -> None:
    logp, old = tokens([1.0])
    adv, mask = torch.ones(1, dtype=F64), torch.ones_like(old)
    with pytest.raises(ValueError, match="no is_weights"):
        LOSSES["ppo"](logp, old, adv, mask, LossConfig(tis=True), n_tokens=1, n_seqs=1)
    with pytest.raises(ValueError, match="tis is off"):
        LOSSES["ppo"](
            logp, old, adv, mask, LossConfig(), is_weights=torch.ones_like(old), n_tokens=1, n_seqs=1
        )


def test_kl_in_loss_adds_beta_times_estimator_and_is_off_at_beta_zero() -> None:
    # rho = 1, A = 0 -> pg = 0; log pi/pi_ref = [ln 2, -ln 2]
    logp, old = tokens([1.0, 1.0])
    ref = old - torch.tensor([[math.log(2)], [-math.log(2)]], dtype=F64)
    adv, mask = torch.zeros(2, dtype=F64), torch.ones_like(old)
    # k3 = exp(-x) + x - 1: x = ln2 -> .5 + ln2 - 1; x = -ln2 -> 2 - ln2 - 1 => mean (2.5 - 2) / 2 = .25
    cfg = LossConfig(kl_beta=0.1, kl_estimator="k3")
    loss, m = LOSSES["ppo"](logp, old, adv, mask, cfg, ref_logp=ref, n_tokens=2, n_seqs=2)
    assert loss.item() == pytest.approx(0.1 * 0.25) and m["kl/mean"] == pytest.approx(0.25)
    # k2 = x^2 / 2 = (ln 2)^2 / 2 on both tokens
    loss2, _ = LOSSES["ppo"](
        logp,
        old,
        adv,
        mask,
        cfg.model_copy(update={"kl_estimator": "k2"}),
        ref_logp=ref,
        n_tokens=2,
        n_seqs=2,
    )
    assert loss2.item() == pytest.approx(0.1 * math.log(2) ** 2 / 2)
    loss0, m0 = LOSSES["ppo"](logp, old, adv, mask, LossConfig(), ref_logp=ref, n_tokens=2, n_seqs=2)
    assert loss0.item() == 0.0 and "kl/mean" not in m0
    # placement "reward": the loss does not add it (the caller adds kl_reward_penalty to the rewards)
    lossr, _ = LOSSES["ppo"](
        logp,
        old,
        adv,
        mask,
        cfg.model_copy(update={"kl_placement": "reward"}),
        ref_logp=ref,
        n_tokens=2,
        n_seqs=2,
    )
    assert lossr.item() == 0.0
    with pytest.raises(ValueError, match="needs ref_logp"):
        LOSSES["ppo"](logp, old, adv, mask, cfg, n_tokens=2, n_seqs=2)


def test_mask_and_token_level_advantages() -> None:
    # adv given per token [B, T]; the padded token (mask 0) contributes nothing
    logp, old = tokens([1.0, 1.0])
    logp2 = logp.reshape(1, 2)
    old2 = old.reshape(1, 2)
    adv = torch.tensor([[1.0, 5.0]], dtype=F64)
    loss, _ = compute_loss(
        logp2, old2, adv, torch.tensor([[1.0, 0.0]], dtype=F64), LossConfig(), n_tokens=1, n_seqs=1
    )
    assert loss.item() == pytest.approx(-1.0)


def test_config_validation() -> None:
    with pytest.raises(ValidationError, match="dual_clip_c must be > 1"):
        LossConfig(dual_clip_c=0.5)
    with pytest.raises(ValidationError):
        LossConfig(clip_eps_lo=0.1)  # typo: extra keys are rejected
