"""Loss pieces against hand-computed values; the discrepancy's sign and bounds; DDP linearity."""

from __future__ import annotations

import math

import pytest
import torch

from reward_models.losses import (
    DISCREPANCIES,
    StepWeights,
    bpr,
    dice_loss,
    discrepancy,
    distance_correlation,
    exposure_pointwise,
    l2_similarity,
    orthogonality,
)
from reward_models.model.embeddings import BatchScores


def ls(x: float) -> float:
    """log sigmoid by hand."""
    return -math.log1p(math.exp(-x))


def scores(p_int, n_int, p_con=None, n_con=None) -> BatchScores:
    """BatchScores of triples from per-branch positive and negative scores."""
    diff = {"interest": torch.tensor(p_int) - torch.tensor(n_int)}
    if p_con is not None:
        diff["conformity"] = torch.tensor(p_con) - torch.tensor(n_con)
    return BatchScores(diff)


def test_bpr_by_hand():
    got = bpr(torch.tensor([1.0, 0.0]))
    assert got.item() == pytest.approx(-(ls(1.0) + ls(0.0)) / 2)
    w = bpr(torch.tensor([2.0, -1.0]), torch.tensor([0.5, 2.0]), norm=4.0)
    assert w.item() == pytest.approx(-(0.5 * ls(2.0) + 2.0 * ls(-1.0)) / 4)


def test_exposure_pointwise_by_hand():
    # clicked logit 0 (label 1), passed logits 0 and 2 (label 0), divided by a norm of 4
    got = exposure_pointwise(torch.tensor([0.0]), torch.tensor([0.0, 2.0]), 4.0)
    assert got.item() == pytest.approx((math.log(2) + math.log(2) + math.log(1 + math.e**2)) / 4)
    # a user-wide shift moves the pointwise loss (a BPR pair of the same logits would not move)
    shifted = exposure_pointwise(torch.tensor([1.0]), torch.tensor([1.0, 3.0]), 4.0)
    assert shifted.item() > got.item()


def test_dice_pieces_by_hand():
    # triple 0: negative more popular; triple 1: negative less popular; triple 2: fallback
    s = scores([1.0, 0.5, 0.2], [0.0, 1.0, 0.0], [0.3, 2.0, 1.0], [1.3, 0.0, 0.0])
    more = torch.tensor([True, False, True])
    fb = torch.tensor([False, False, True])
    total, pieces = dice_loss(s, more, weights=StepWeights(0.1, 0.2, 0.0), fallback=fb)
    click = [1.0 + 0.3 - 1.3, 0.5 + 2.0 - 1.0, 0.2 + 1.0 - 0.0]
    l_click = -sum(ls(x) for x in click) / 3
    l_int = -ls(1.0 - 0.0) / 3  # only triple 0 (negative more popular, not a fallback)
    l_con = -(ls(1.3 - 0.3) + ls(2.0 - 0.0)) / 3  # triple 0: neg > pos; triple 1: pos > neg
    assert pieces["loss/click"].item() == pytest.approx(l_click)
    assert pieces["loss/interest"].item() == pytest.approx(l_int)
    assert pieces["loss/conformity"].item() == pytest.approx(l_con)
    assert total.item() == pytest.approx(l_click + 0.1 * l_int + 0.2 * l_con)


def test_mf_bpr_is_click_only():
    total, pieces = dice_loss(scores([1.0], [0.0]), torch.tensor([True]), weights=StepWeights(1, 1, 1))
    assert set(pieces) == {"loss/click", "loss"}
    assert total.item() == pytest.approx(-ls(1.0))


def test_weights_and_reweighting_multiply():
    s = scores([1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])
    more = torch.tensor([True, True])
    _, p = dice_loss(
        s,
        more,
        weights=StepWeights(1.0, 1.0, 0.0),
        pos_weight=torch.tensor([2.0, 1.0]),
        int_weight=torch.tensor([3.0, 1.0]),
    )
    assert p["loss/interest"].item() == pytest.approx(-(6.0 * ls(1.0) + ls(0.0)) / 2)
    assert p["loss/click"].item() == pytest.approx(-(2.0 * ls(1.0) + ls(0.0)) / 2)


def test_sum_over_shards_equals_the_global_batch():
    """norm = global/ranks makes the mean of shard losses the global loss (DDP parity)."""
    g = torch.Generator().manual_seed(0)
    n = 10
    s = scores(*(torch.randn(n, generator=g).tolist() for _ in range(4)))
    more = torch.rand(n, generator=g) < 0.5
    w = StepWeights(0.3, 0.7, 0.0)
    full, _ = dice_loss(s, more, weights=w)

    def part(sl):
        sub = BatchScores({k: v[sl] for k, v in s.diff.items()})
        return dice_loss(sub, more[sl], weights=w, norm=n / 2)[0]

    assert ((part(slice(0, 5)) + part(slice(5, 10))) / 2).item() == pytest.approx(full.item(), rel=1e-6)


@pytest.mark.parametrize("kind", ["dcor", "l2", "orthogonal"])
def test_correlated_embeddings_raise_the_discrepancy(kind):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    independent = torch.randn(64, 8, generator=g)
    correlated = x + 0.1 * torch.randn(64, 8, generator=g)
    d_ind = discrepancy(kind, [(x, independent)])
    d_cor = discrepancy(kind, [(x, correlated)])
    assert 0.0 <= d_ind.item() <= 1.0 and 0.0 <= d_cor.item() <= 1.0
    assert d_cor.item() > d_ind.item() + 0.3
    # ... and so raise the total loss
    s = scores([0.0], [0.0], [0.0], [0.0])
    w = StepWeights(0.1, 0.1, 0.5)
    lo = dice_loss(s, torch.tensor([True]), weights=w, disc=d_ind)[0]
    hi = dice_loss(s, torch.tensor([True]), weights=w, disc=d_cor)[0]
    assert hi.item() > lo.item()


def test_distance_correlation_values():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(50, 4, generator=g)
    assert distance_correlation(x, x).item() == pytest.approx(1.0, abs=1e-5)
    assert distance_correlation(x, 3.0 * x + 1.0).item() == pytest.approx(
        1.0, abs=1e-5
    )  # scale/shift invariant
    # dCor detects a dependence that correlation misses
    y = x.pow(2)
    assert distance_correlation(x, y).item() > distance_correlation(x, torch.randn(50, 4, generator=g)).item()


def test_discrepancy_gradients_are_finite_with_duplicate_rows():
    x = torch.randn(16, 4, requires_grad=True)
    y = torch.randn(16, 4, requires_grad=True)
    for fn in (distance_correlation, l2_similarity, orthogonality):
        xx = torch.cat([x, x[:3]])  # repeated rows: zero distances off the diagonal
        yy = torch.cat([y, y[:3]])
        fn(xx, yy).backward()
        assert torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()
        x.grad = y.grad = None


def test_none_and_unknown():
    assert DISCREPANCIES["none"](torch.ones(3, 2), torch.ones(3, 2)).item() == 0.0
    with pytest.raises(KeyError, match="unknown discrepancy 'cosine'"):
        discrepancy("cosine", [(torch.ones(3, 2), torch.ones(3, 2))])


def plain_dcor(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dCor² written as plain autograd ops (the formula the closed-form backward must match)."""

    def centred(z: torch.Tensor) -> torch.Tensor:
        sq = (z * z).sum(-1)
        d2 = (sq[:, None] + sq[None, :] - 2.0 * z @ z.T).clamp(min=1e-12)
        d = d2.sqrt() * (1.0 - torch.eye(z.shape[0], dtype=z.dtype))
        return d - d.mean(0, keepdim=True) - d.mean(1, keepdim=True) + d.mean()

    a, b = centred(x), centred(y)
    return ((a * b).mean() / ((a * a).mean() * (b * b).mean()).sqrt().clamp(min=1e-12)).clamp(0.0, 1.0)


def test_distance_correlation_gradient_is_the_plain_autograd_one():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(30, 5, dtype=torch.float64, generator=g, requires_grad=True)
    y = (x.detach()[:, :3] ** 2 + torch.randn(30, 3, dtype=torch.float64, generator=g)).requires_grad_()
    got = distance_correlation(x, y)
    got.backward()
    gx, gy = x.grad.clone(), y.grad.clone()
    x.grad = y.grad = None
    want = plain_dcor(x, y)
    want.backward()
    assert got.item() == pytest.approx(want.item(), rel=1e-12)
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gy, y.grad)  # different widths (5 and 3): zero-padded columns
    assert torch.autograd.gradcheck(distance_correlation, (x, y))


def test_discrepancy_batches_pairs_of_one_shape():
    """Users and items of one size go through one stacked call: the same mean as one call each."""
    g = torch.Generator().manual_seed(4)
    pairs = [(torch.randn(12, 4, generator=g), torch.randn(12, 4, generator=g)) for _ in range(2)]
    for kind in ("dcor", "l2", "orthogonal"):
        want = sum(DISCREPANCIES[kind](a, b) for a, b in pairs) / 2
        assert discrepancy(kind, pairs).item() == pytest.approx(want.item(), rel=1e-5)
    mixed = [pairs[0], (pairs[1][0][:7], pairs[1][1][:7])]
    want = (plain_dcor(*mixed[0]) + plain_dcor(*mixed[1])) / 2
    assert discrepancy("dcor", mixed).item() == pytest.approx(want.item(), rel=1e-5)


def test_reg_needs_the_squared_norms():
    with pytest.raises(ValueError, match="sq_norm"):
        dice_loss(scores([1.0], [0.0]), torch.tensor([True]), weights=StepWeights(0, 0, 0, reg=0.1))
    s = BatchScores({"interest": torch.tensor([1.0])}, sq_norm=torch.tensor(4.0))
    total, pieces = dice_loss(s, torch.tensor([True]), weights=StepWeights(0, 0, 0, reg=0.5), norm=2.0)
    assert pieces["loss/reg"].item() == pytest.approx(2.0)
    assert total.item() == pytest.approx(-ls(1.0) / 2 + 0.5 * 2.0)


def test_exposed_triples_train_interest_always_and_conformity_never():
    # two triples, both with the negative less popular (O = 0): normally interest is off for both
    d_int, d_con = torch.tensor([0.5, -1.0]), torch.tensor([2.0, 0.0])
    scores = BatchScores({"interest": d_int, "conformity": d_con})
    more = torch.tensor([False, False])
    w = StepWeights(int=1.0, con=1.0, disc=0.0)
    _, plain = dice_loss(scores, more, weights=w)
    _, mixed = dice_loss(scores, more, weights=w, exposed=torch.tensor([False, True]))
    ls = torch.nn.functional.logsigmoid
    assert float(plain["loss/interest"]) == 0.0
    # the exposed triple alone enters the interest term, and leaves the conformity term
    assert float(mixed["loss/interest"]) == pytest.approx(float(-ls(torch.tensor(-1.0)) / 2), rel=1e-6)
    assert float(mixed["loss/conformity"]) == pytest.approx(float(-ls(torch.tensor(2.0)) / 2), rel=1e-6)
    assert float(mixed["loss/click"]) == pytest.approx(float(plain["loss/click"]), rel=1e-6)
