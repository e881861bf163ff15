"""The multi-view profile encoder: one small MLP per view, attention fusion, and its two losses.

    e_v = MLP_v(x_v)                                   [U, D] per view v
    a_v = softmax_v over present views of  q . tanh(W e_v + b)
    z   = sum_v a_v e_v                                [U, D]

Training (self-supervised, on warm users): reconstruction of every present view from
``z`` (one linear-GELU-linear decoder per view, MSE) plus InfoNCE between the fusions
of two random view dropouts of the same users (SimCLR-style, in-batch negatives):

    L = sum_v mean_u (x_v - dec_v(z))^2  +  w_nce * InfoNCE(z', z'')
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def mlp(d_in: int, hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, d_out))


class ProfileEncoder(nn.Module):
    """Views (name -> [U, d_v]) and their mask [U, V] -> profile ``z`` [U, dim] and attention [U, V]."""

    def __init__(self, dims: dict[str, int], dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.names = list(dims)
        self.dim = dim
        self.towers = nn.ModuleDict({k: mlp(d, hidden, dim) for k, d in dims.items()})
        self.decoders = nn.ModuleDict({k: mlp(dim, hidden, d) for k, d in dims.items()})
        self.att = nn.Linear(dim, dim)
        self.query = nn.Parameter(torch.zeros(dim))

    def forward(self, views: dict[str, Tensor], mask: Tensor) -> tuple[Tensor, Tensor]:
        """z [U, dim] and attention weights [U, V] (each row sums to 1; all zero when no view is present)."""
        e = torch.stack([self.towers[k](views[k]) for k in self.names], 1)  # [U, V, dim]
        logits = torch.tanh(self.att(e)) @ self.query  # [U, V]
        logits = logits.masked_fill(~mask, float("-inf"))
        any_view = mask.any(1, keepdim=True)
        w = torch.where(any_view, torch.softmax(logits.masked_fill(~any_view, 0.0), 1), 0.0)
        return (w[:, :, None] * e).sum(1), w

    def reconstruction(self, z: Tensor, views: dict[str, Tensor], mask: Tensor) -> Tensor:
        """Mean over views of the masked MSE of each present view decoded from ``z`` [U, dim]; scalar."""
        losses = []
        for k, name in enumerate(self.names):
            m = mask[:, k].float()
            err = ((self.decoders[name](z) - views[name]) ** 2).mean(1)
            losses.append((err * m).sum() / m.sum().clamp(min=1.0))
        return torch.stack(losses).mean()


def view_dropout(mask: Tensor, p: float, generator: torch.Generator | None = None) -> Tensor:
    """Drop each present view with probability ``p``, keeping at least one per user; [U, V] bool."""
    keep = mask & (torch.rand(mask.shape, generator=generator) >= p)
    empty = ~keep.any(1) & mask.any(1)
    if bool(empty.any()):  # restore one present view at random for users left with none
        score = torch.rand(mask.shape, generator=generator).masked_fill(~mask, -1.0)
        pick = F.one_hot(score.argmax(1), mask.shape[1]).bool()
        keep = torch.where(empty[:, None], pick, keep)
    return keep


def info_nce(a: Tensor, b: Tensor, temperature: float) -> Tensor:
    """Symmetric InfoNCE between two views of the same rows, a, b [U, D]; row k of a matches row k of b."""
    a, b = F.normalize(a, dim=1), F.normalize(b, dim=1)
    logits = a @ b.T / temperature
    target = torch.arange(a.shape[0])
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
