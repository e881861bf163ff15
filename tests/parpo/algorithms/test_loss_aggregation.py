"""Aggregation by hand, and one batch == the same batch split into four micro-batches."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from parpo.algorithms import AGGREGATIONS, LOSSES, LossConfig

F64 = torch.float64
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]], dtype=F64)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


@pytest.mark.parametrize(
    ("name", "norm_len", "expected"),
    [
        ("token-mean", None, 15 / 5),  # sum 15 over 5 tokens
        ("seq-mean-token-mean", None, (6 / 3 + 9 / 2) / 2),  # 3.25
        ("seq-mean-token-sum", None, 15 / 2),
        ("seq-mean-token-sum-norm", None, 15 / (2 * 3)),  # L = T = 3
        ("seq-mean-token-sum-norm", 4, 15 / (2 * 4)),
        ("dr_grpo", 10, 15 / (2 * 10)),
    ],
)
def test_aggregations_by_hand(name: str, norm_len: int | None, expected: float) -> None:
    out = AGGREGATIONS[name](LOSS, MASK, n_tokens=5, n_seqs=2, norm_len=norm_len)
    assert out.item() == pytest.approx(expected)


def test_dr_grpo_requires_a_constant_normaliser() -> None:
    with pytest.raises(ValueError, match="norm_len"):
        AGGREGATIONS["dr_grpo"](LOSS, MASK, n_tokens=5, n_seqs=2)


@st.composite
def batches(draw):
    b = draw(st.integers(4, 12))
    t = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**31 - 1))
    lengths = draw(st.lists(st.integers(1, t), min_size=b, max_size=b))
    cuts = sorted(draw(st.lists(st.integers(1, b - 1), min_size=3, max_size=3, unique=True)))
    return b, t, seed, lengths, cuts


@settings(max_examples=40, deadline=None)
@given(
    batches(),
    st.sampled_from(
        ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "dr_grpo"]
    ),
)
def test_one_batch_equals_four_micro_batches(batch, aggregation) -> None:
    """Loss and gradient of the PPO loss are the same whole or in four micro-batches, each padded
    only to its own longest sequence (global n_tokens / n_seqs passed in, as the caller all-reduces)."""
    b, t, seed, lengths, cuts = batch
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).to(F64)
    logp = (-torch.rand(b, t, generator=gen, dtype=F64)).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(b, t, generator=gen, dtype=F64)
    adv = torch.randn(b, generator=gen, dtype=F64)
    ref = logp.detach() + 0.1 * torch.randn(b, t, generator=gen, dtype=F64)
    cfg = LossConfig(aggregation=aggregation, norm_len=8, kl_beta=0.05, kl_estimator="k3")
    n_tokens, n_seqs = int(mask.sum()), b

    full, _ = LOSSES["ppo"](logp, old, adv, mask, cfg, ref_logp=ref, n_tokens=n_tokens, n_seqs=n_seqs)
    (g_full,) = torch.autograd.grad(full, logp)

    total = torch.zeros((), dtype=F64)
    for lo, hi in zip([0, *cuts], [*cuts, b], strict=True):
        width = max(lengths[lo:hi])  # each micro-batch padded to its own length
        part, _ = LOSSES["ppo"](
            logp[lo:hi, :width],
            old[lo:hi, :width],
            adv[lo:hi],
            mask[lo:hi, :width],
            cfg,
            ref_logp=ref[lo:hi, :width],
            n_tokens=n_tokens,
            n_seqs=n_seqs,
        )
        total = total + part
    (g_micro,) = torch.autograd.grad(total, logp)
    assert total.item() == pytest.approx(full.item(), rel=1e-12, abs=1e-12)
    assert torch.allclose(g_micro, g_full, atol=1e-12)


def test_counts_may_be_tensors_from_an_all_reduce() -> None:
    out = AGGREGATIONS["token-mean"](LOSS, MASK, n_tokens=torch.tensor(5.0), n_seqs=torch.tensor(2))
    assert out.item() == pytest.approx(3.0)
