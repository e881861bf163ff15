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
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from parpo_core.names import NameRegistry
from reward_models.model.embeddings import BatchScores

DISCREPANCIES: NameRegistry[Callable[[Tensor, Tensor], Tensor]] = NameRegistry("discrepancy")
register = DISCREPANCIES.register


def bpr(diff: Tensor, weight: Tensor | None = None, norm: float | None = None) -> Tensor:
    """``-sum_b w_b log σ(diff_b) / norm``; diff = score(pos) - score(neg), weight [B] -> scalar
    (norm: B by default)."""
    ll = F.logsigmoid(diff)
    if weight is not None:
        ll = ll * weight
    return -ll.sum() / (norm if norm is not None else max(diff.shape[0], 1))


def _distances(x: Tensor) -> Tensor:
    """Pairwise Euclidean distances [P, n, n] of x [P, n, d], exact zero diagonal (squares clamped at 1e-12)."""
    sq = (x * x).sum(-1)
    d = torch.baddbmm(sq[:, :, None] + sq[:, None, :], x, x.transpose(1, 2), alpha=-2.0)
    d = d.clamp_(min=1e-12).sqrt_()
    d.diagonal(dim1=1, dim2=2).zero_()
    return d


def _double_centre(d: Tensor) -> Tensor:
    """``d - row means - column means + grand mean`` of symmetric d [P, n, n]."""
    m = d.mean(2, keepdim=True)
    return d - m - m.transpose(1, 2) + m.mean(1, keepdim=True)


class _DistanceCorrelation(torch.autograd.Function):
    """dCor² of P paired samples x [P, n, d], y [P, n, e] -> [P], with a closed-form backward.

    With A, B the double-centred distance matrices and V_ab = mean(A ∘ B), R = V_xy / sqrt(V_xx V_yy).
    Centring is a self-adjoint projection, so dV_xy/dD_x = B / n² and dV_xx/dD_x = 2 A / n²:
    dR/dD_x = (B / s - R A / V_xx) / n² (s = sqrt(V_xx V_yy)); through D_ij = |x_i - x_j|,
    grad x = 2 (rowsum(W) x - W x) with W = dR/dD_x / D off the diagonal. x and y go through
    every step stacked ([2P, n, max(d, e)], zero columns change no distance): autograd through
    the separate n x n intermediates cost about 4x more.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, y: Tensor) -> Tensor:
        p, width = x.shape[0], max(x.shape[2], y.shape[2])
        z = torch.cat([F.pad(x, (0, width - x.shape[2])), F.pad(y, (0, width - y.shape[2]))])
        d = _distances(z)
        c = _double_centre(d)  # [A; B]
        v = (c * c).mean((1, 2))  # [V_xx; V_yy]
        vxy = (c[:p] * c[p:]).mean((1, 2))
        s = (v[:p] * v[p:]).sqrt()
        r = vxy / s.clamp(min=1e-12)
        ctx.save_for_backward(z, d, c, v, r, s)
        ctx.dims = (x.shape[2], y.shape[2])
        return r.clamp(0.0, 1.0)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        z, d, c, v, r, s = ctx.saved_tensors
        p, n2 = r.shape[0], float(z.shape[1] ** 2)
        g = (grad * ((r >= 0) & (r <= 1))).div(n2).repeat(2)[:, None, None]
        inv_s = s.clamp(min=1e-12).reciprocal().repeat(2)[:, None, None]
        live = (s > 1e-12).repeat(2)  # below the clamp, s is a constant
        coef = torch.where(live, r.repeat(2) / v.clamp(min=1e-30), 0.0)[:, None, None]
        other = torch.cat([c[p:], c[:p]])
        w = g * (other * inv_s - c * coef) / d.clamp(min=1e-6)
        w.masked_fill_(d <= 1e-6, 0.0)  # the diagonal and coinciding rows: no direction
        gz = 2.0 * (w.sum(2, keepdim=True) * z - torch.bmm(w, z))
        dx, dy = ctx.dims
        return gz[:p, :, :dx], gz[p:, :, :dy]


@register("dcor")
def distance_correlation(x: Tensor, y: Tensor) -> Tensor:
    """Squared distance correlation dCor²(x, y) in [0, 1] of paired samples x [..., n, d], y [..., n, e].

    0 iff independent (in the population), 1 for x = y (up to scale and rotation). A leading
    dimension computes several pairs in one call (``discrepancy`` stacks users and items).
    """
    if x.dim() == 2:
        return _DistanceCorrelation.apply(x[None], y[None])[0]
    return _DistanceCorrelation.apply(x, y)


@register("l2")
def l2_similarity(x: Tensor, y: Tensor) -> Tensor:
    """``mean (1 + cos(x_r, y_r)) / 2`` in [0, 1] over the rows: one minus a quarter of the squared
    L2 distance of the unit vectors. x, y [..., n, d] -> [...]."""
    return (1.0 + F.cosine_similarity(x, y, dim=-1, eps=1e-8)).mean(-1) / 2.0


@register("orthogonal")
def orthogonality(x: Tensor, y: Tensor) -> Tensor:
    """``mean cos(x_r, y_r)²`` in [0, 1] over the rows: 0 when every row pair is orthogonal.
    x, y [..., n, d] -> [...]."""
    return F.cosine_similarity(x, y, dim=-1, eps=1e-8).pow(2).mean(-1)


@register("none")
def no_discrepancy(x: Tensor, y: Tensor) -> Tensor:
    return x.new_zeros(x.shape[:-2])


def discrepancy(kind: str, pairs: list[tuple[Tensor, Tensor]]) -> Tensor:
    """Mean of ``DISCREPANCIES[kind](a, b)`` over (interest, conformity) row pairs (users, items);
    pairs of one shape go through one batched call."""
    fn = DISCREPANCIES[kind]
    used = [(a, b) for a, b in pairs if a.shape[0] >= 2]
    if not used:
        return pairs[0][0].new_zeros(())
    if len({(a.shape, b.shape) for a, b in used}) == 1:
        return fn(torch.stack([a for a, _ in used]), torch.stack([b for _, b in used])).mean()
    return torch.stack([fn(a, b) for a, b in used]).mean()


def exposure_pointwise(clicked: Tensor, passed: Tensor, norm: float) -> Tensor:
    """Pointwise log-loss of exposures, ``(sum softplus(-clicked) + sum softplus(passed)) / norm``.

    clicked [P]: logits (click score + bias) of train positives (label 1); passed [N]: logits of
    impressions shown and not taken (label 0) -> scalar. Unlike a BPR pair, it compares every
    pair with a level shared by all users, so what a user passed over counts on its own, not
    only against one of the user's positives."""
    return (F.softplus(-clicked).sum() + F.softplus(passed).sum()) / norm


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
    exposed: Tensor | None = None,
    disc: Tensor | None = None,
    norm: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Total loss (scalar) and its detached pieces (module docstring).

    scores: per-branch [B] score differences positive - negative (one branch for MF-BPR:
    only ``L_click``); neg_more_popular, fallback: [B] bool; pos_weight: [B] weight of
    the positive; click_weight: [B] extra weight of the click term only (importance
    weights back to uniform negatives); int_weight, con_weight: [B] popularity re-weighting of the two cause
    branches; exposed: [B] bool, triples whose negative was shown too (an impression): both
    items had the same exposure, so the choice is taste: the interest term applies whatever
    the popularity order and the conformity term does not; disc: the discrepancy value
    (already computed on the subsample);
    norm: divisor of the sums (batch size when None).
    """
    b = neg_more_popular.shape[0]
    norm = float(norm if norm is not None else max(b, 1))
    pw = pos_weight if pos_weight is not None else torch.ones(b, device=neg_more_popular.device)
    wk = pw * click_weight if click_weight is not None else pw
    loss_click = bpr(scores.click, wk, norm)
    pieces = {"loss/click": loss_click.detach()}
    total = loss_click
    if "conformity" in scores.diff:
        more = neg_more_popular.to(pw.dtype)
        valid = 1.0 - fallback.to(pw.dtype) if fallback is not None else torch.ones_like(pw)
        wi = pw * valid * (int_weight if int_weight is not None else 1.0)
        wc = pw * valid * (con_weight if con_weight is not None else 1.0)
        if exposed is not None:
            more = torch.where(exposed, 1.0, more)
            wc = wc * (~exposed).to(pw.dtype)
        d_int, d_con = scores.diff["interest"], scores.diff["conformity"]
        loss_int = bpr(d_int, wi * more, norm)
        # O: con(u,j) > con(u,i), else con(u,i) > con(u,j): one log-sigmoid of the signed difference
        loss_con = bpr(torch.where(neg_more_popular, -d_con, d_con), wc, norm)
        total = total + weights.int * loss_int + weights.con * loss_con
        pieces |= {"loss/interest": loss_int.detach(), "loss/conformity": loss_con.detach()}
    if disc is not None:
        total = total + weights.disc * disc
        pieces["loss/discrepancy"] = disc.detach()
    if weights.reg > 0:
        if scores.sq_norm is None:
            raise ValueError("dice_loss: weights.reg > 0 needs the rows' squared norms (sq_norm=True)")
        reg = scores.sq_norm / norm
        total = total + weights.reg * reg
        pieces["loss/reg"] = reg.detach()
    pieces["loss"] = total.detach()
    return total, pieces
