"""Group and batch statistics used by the advantage estimators.

All standard deviations here are **population** standard deviations (divide by ``n``) unless
``sample=True`` is passed (divide by ``n - 1``; what ``torch.std``, verl and TRL use). The
population form is defined for groups of one rollout (std 0, advantage 0) and is what the
hand-computed numbers in the tests use.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True, eq=False)
class GroupStats:
    """Per-rollout views of per-group statistics; every field is ``[B]`` unless stated.

    ``centered`` is ``x - mean`` computed from values shifted by the group maximum, so a group of
    identical rewards gives exactly ``0`` (no ``1e-17`` residue divided by ``eps``).
    """

    mean: Tensor
    std: Tensor
    centered: Tensor
    count: Tensor  # [B] int64, size of the rollout's group
    index: Tensor  # [B] int64, dense group index in [0, n_groups)
    group_std: Tensor  # [G] std per group (for per-group metrics)
    group_count: Tensor  # [G] int64


def dense_index(ids: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary integer ids ``[B]`` to dense indices ``[B]`` in ``[0, G)``; returns (index, G)."""
    uniq, inv = torch.unique(ids, return_inverse=True)
    return inv, int(uniq.numel())


def group_mean_std(x: Tensor, group: Tensor, *, sample: bool = False) -> GroupStats:
    """Mean and std of ``x`` ``[B]`` within the groups given by integer ids ``group`` ``[B]``.

    Vectorised with ``index_add_``/``scatter_reduce`` (no Python loop over groups). Population std
    by default; ``sample=True`` divides by ``n - 1`` and gives 0 for groups of one.
    """
    if x.ndim != 1 or x.shape != group.shape:
        raise ValueError(
            f"expected x and group of the same shape [B], got {tuple(x.shape)} and {tuple(group.shape)}"
        )
    idx, n_groups = dense_index(group)
    # Shift by the group max (deterministic, unlike scatter) for exact zeros and numerical stability.
    shift = torch.full((n_groups,), float("-inf"), dtype=x.dtype, device=x.device)
    shift = shift.scatter_reduce(0, idx, x, reduce="amax", include_self=True)
    xs = x - shift[idx]
    count = torch.zeros(n_groups, dtype=torch.long, device=x.device).index_add_(0, idx, torch.ones_like(idx))
    n = count.to(x.dtype)
    mean_s = torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, idx, xs) / n
    centered = xs - mean_s[idx]
    m2 = torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, idx, centered * centered)
    denom = (n - 1).clamp_min(1) if sample else n
    std = (m2 / denom).sqrt()
    return GroupStats(
        mean=(shift + mean_s)[idx],
        std=std[idx],
        centered=centered,
        count=count[idx],
        index=idx,
        group_std=std,
        group_count=count,
    )


def whiten(x: Tensor, eps: float = 1e-6, *, sample: bool = False) -> Tensor:
    """Batch whitening ``(x - mean(x)) / (std(x) + eps)`` over all of ``x`` ``[B]``.

    Population std by default (see the module docstring). Used by GDPO's batch-wise advantage
    normalisation (arXiv 2601.05242).
    """
    if x.numel() == 0:
        return x
    centered = x - x.mean()
    denom = max(x.numel() - 1, 1) if sample else x.numel()
    std = (centered.pow(2).sum() / denom).sqrt()
    return centered / (std + eps)
