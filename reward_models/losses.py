"""Losses of the stage-2 reward model: BPR pieces and the interest/conformity discrepancy.

Pure tensor functions, no logging (metrics are returned). All BPR terms are in
log-sigmoid form and *sums over the batch divided by* ``norm`` (by default the
batch size), never means over a masked subset: a masked term then stays linear
in the triples, so ``R`` ranks with ``norm = global_batch / R`` give the same
gradient as one process with the global batch (DDP parity).

DICE (Zheng et al., WWW 2021), for a triple (u, i, j) with ``O = [pop(j) > pop(i)]``:

    L_click = -w_ij log σ(click(u,i) - click(u,j))                            every triple
    L_int   = -O · log σ(int(u,i) - int(u,j))                                 j more popular: i won on taste
    L_con   = -O · log σ(con(u,j) - con(u,i)) - (1-O) · log σ(con(u,i) - con(u,j))
    L       = L_click + w_int L_int + w_con L_con + w_disc D(int, con) + reg ||rows||²

``w_ij`` is 1, or the importance weight that makes the click term a uniform-negative
BPR again (``TripleStream._click_weight``: the sampler over-draws the popularity side
it is told to). Triples the sampler flags ``fallback`` (no negative beyond the margin) only enter
``L_click``. ``D`` is bounded in [0, 1] and grows when the two embeddings agree:

- ``dcor``: squared distance correlation (Székely et al., 2007) of the interest
  and conformity vectors, on a fixed-size random subsample of the batch's users
  and items (full dCor is quadratic in the batch), averaged over users and items;
- ``l2``: mean of ``1 - ||â - b̂||² / 4 = (1 + cos(a, b)) / 2`` over the same rows
  (the DICE code *maximises* an unbounded L2 distance instead; this is its bounded form);
- ``orthogonal``: mean of ``cos(a, b)²``;
- ``none``: 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from reward_models.model.embeddings import BatchScores

DISCREPANCIES: dict[str, Callable[[Tensor, Tensor], Tensor]] = {}


def register(name: str):
    def wrap(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Tensor, Tensor], Tensor]:
        DISCREPANCIES[name] = fn
        return fn

    return wrap


def bpr(pos: Tensor, neg: Tensor, weight: Tensor | None = None, norm: float | None = None) -> Tensor:
    """``-sum_b w_b log σ(pos_b - neg_b) / norm``; pos, neg, weight [B] -> scalar (norm: B by default)."""
    ll = F.logsigmoid(pos - neg)
    if weight is not None:
        ll = ll * weight
    return -ll.sum() / (norm if norm is not None else max(pos.shape[0], 1))


def _pairwise_distances(x: Tensor) -> Tensor:
    """Euclidean distances [n, n] with an exact zero diagonal and finite gradients everywhere."""
    sq = (x * x).sum(-1)
    d2 = (sq[:, None] + sq[None, :] - 2.0 * x @ x.T).clamp(min=1e-12)
    return d2.sqrt() * (1.0 - torch.eye(x.shape[0], dtype=x.dtype, device=x.device))


def _double_centre(d: Tensor) -> Tensor:
    return d - d.mean(0, keepdim=True) - d.mean(1, keepdim=True) + d.mean()


@register("dcor")
def distance_correlation(x: Tensor, y: Tensor) -> Tensor:
    """Squared distance correlation dCor²(x, y) in [0, 1] of paired samples x [n, d], y [n, e].

    0 iff independent (in the population), 1 for x = y (up to scale and rotation).
    """
    a, b = _double_centre(_pairwise_distances(x)), _double_centre(_pairwise_distances(y))
    dcov_xy, dcov_xx, dcov_yy = (a * b).mean(), (a * a).mean(), (b * b).mean()
    return (dcov_xy / (dcov_xx * dcov_yy).sqrt().clamp(min=1e-12)).clamp(0.0, 1.0)


@register("l2")
def l2_similarity(x: Tensor, y: Tensor) -> Tensor:
    """``mean (1 + cos(x_r, y_r)) / 2`` in [0, 1]: one minus a quarter of the squared L2
    distance of the unit vectors. x, y [n, d]."""
    return (1.0 + F.cosine_similarity(x, y, dim=-1, eps=1e-8)).mean() / 2.0


@register("orthogonal")
def orthogonality(x: Tensor, y: Tensor) -> Tensor:
    """``mean cos(x_r, y_r)²`` in [0, 1]: 0 when every row pair is orthogonal. x, y [n, d]."""
    return F.cosine_similarity(x, y, dim=-1, eps=1e-8).pow(2).mean()


@register("none")
def no_discrepancy(x: Tensor, y: Tensor) -> Tensor:
    return x.new_zeros(())


def discrepancy(kind: str, pairs: list[tuple[Tensor, Tensor]]) -> Tensor:
    """Mean of ``DISCREPANCIES[kind](a, b)`` over (interest, conformity) row pairs (users, items)."""
    if kind not in DISCREPANCIES:
        raise ValueError(f"unknown discrepancy {kind!r}; choose from {sorted(DISCREPANCIES)}")
    fn = DISCREPANCIES[kind]
    vals = [fn(a, b) for a, b in pairs if a.shape[0] >= 2]
    return torch.stack(vals).mean() if vals else pairs[0][0].new_zeros(())


@dataclass
class StepWeights:
    """The current (curriculum-decayed) weights of one step."""

    int: float
    con: float
    disc: float
    reg: float = 0.0


def dice_loss(
    scores: BatchScores,
    neg_more_popular: Tensor,
    *,
    weights: StepWeights,
    fallback: Tensor | None = None,
    pos_weight: Tensor | None = None,
    click_weight: Tensor | None = None,
    int_weight: Tensor | None = None,
    con_weight: Tensor | None = None,
    disc: Tensor | None = None,
    norm: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Total loss (scalar) and its detached pieces (module docstring).

    scores: per-branch [B] scores of positives and negatives (one branch for MF-BPR:
    only ``L_click``); neg_more_popular, fallback: [B] bool; pos_weight: [B] weight of
    the positive; click_weight: [B] extra weight of the click term only (importance
    weights back to uniform negatives); int_weight, con_weight: [B] popularity re-weighting of the two cause
    branches; disc: the discrepancy value (already computed on the subsample);
    norm: divisor of the sums (batch size when None).
    """
    b = neg_more_popular.shape[0]
    norm = float(norm if norm is not None else max(b, 1))
    pw = pos_weight if pos_weight is not None else torch.ones(b, device=neg_more_popular.device)
    wk = pw * click_weight if click_weight is not None else pw
    loss_click = bpr(scores.click("pos"), scores.click("neg"), wk, norm)
    pieces = {"loss/click": loss_click.detach()}
    total = loss_click
    if "conformity" in scores.pos:
        more = neg_more_popular.to(pw.dtype)
        valid = 1.0 - fallback.to(pw.dtype) if fallback is not None else torch.ones_like(pw)
        wi = pw * valid * (int_weight if int_weight is not None else 1.0)
        wc = pw * valid * (con_weight if con_weight is not None else 1.0)
        p_int, n_int = scores.pos["interest"], scores.neg["interest"]
        p_con, n_con = scores.pos["conformity"], scores.neg["conformity"]
        loss_int = bpr(p_int, n_int, wi * more, norm)
        loss_con = bpr(n_con, p_con, wc * more, norm) + bpr(p_con, n_con, wc * (1.0 - more), norm)
        total = total + weights.int * loss_int + weights.con * loss_con
        pieces |= {"loss/interest": loss_int.detach(), "loss/conformity": loss_con.detach()}
    if disc is not None:
        total = total + weights.disc * disc
        pieces["loss/discrepancy"] = disc.detach()
    if weights.reg > 0:
        sq = sum((u * u).sum() + (p * p).sum() + (n * n).sum() for u, p, n in scores.rows.values())
        reg = sq / norm
        total = total + weights.reg * reg
        pieces["loss/reg"] = reg.detach()
    pieces["loss"] = total.detach()
    return total, pieces
