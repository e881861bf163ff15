"""Popularity-bias diagnostics of top-K lists against train popularity.

popularity: [I] train interaction counts per item (``splits.train_popularity`` gives them by id;
index them by item index, zeros for unseen items). For the top-k lists of U users (U * k slots):

    avg_pop@k       mean over the U * k slots of popularity[item]
    avg_pop_norm@k  avg_pop@k / max_i popularity[i]                          in [0, 1]
    gini@k          Gini index of the recommendation counts over all I items  in [0, 1 - 1/I]
    tail_share@k    fraction of the slots that hold a tail item (not in ``head_mask``)
    coverage@k      fraction of the I items recommended at least once

See docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from data_pipelines.metrics.ranking import DEFAULT_KS

#: Share of train interactions covered by the head (the 80/20 convention).
HEAD_SHARE = 0.8
BIAS_METRICS: tuple[str, ...] = ("avg_pop", "avg_pop_norm", "gini", "tail_share", "coverage")


def gini(x: Any) -> float:
    """Gini index of non-negative values x [n]:

        G = sum_i sum_j |x_i - x_j| / (2 n^2 mean(x)) = sum_i (2 i - n - 1) x_(i) / (n sum x)

    with x_(1) <= ... <= x_(n) (i from 1). 0 for equal values (and for all zeros), (n - 1) / n
    when one value holds everything: gini([0, 0, 0, 1]) = 0.75. Not rescaled to reach 1; this is
    RecBole's GiniIndex when x holds every catalogue item's recommendation count.
    """
    x = np.sort(np.asarray(x, dtype=np.float64).ravel())
    if x.size == 0:
        raise ValueError("gini of an empty array is undefined")
    if x[0] < 0:
        raise ValueError(f"gini needs non-negative values; got {x[0]}")
    total = x.sum()
    if total == 0:
        return 0.0
    n = x.size
    weights = 2.0 * np.arange(1, n + 1) - n - 1
    return float(weights @ x / (n * total))


def head_mask(popularity: Any, head_share: float = HEAD_SHARE) -> np.ndarray:
    """Head items: the most popular items that together hold ``head_share`` of the train
    interactions; [I] bool.

    Items sorted by count (descending, ties by lower item index first); the head is the shortest
    prefix whose cumulative count reaches head_share * total. Everything else is the tail,
    including items never seen in train. All counts zero: no head.
    """
    pop = np.asarray(popularity, dtype=np.float64).ravel()
    if not 0.0 < head_share <= 1.0:
        raise ValueError(f"head_share must be in (0, 1]; got {head_share}")
    head = np.zeros(pop.size, dtype=bool)
    total = pop.sum()
    if total <= 0:
        return head
    order = np.lexsort((np.arange(pop.size), -pop))
    cum = np.cumsum(pop[order])
    n_head = int(np.searchsorted(cum, head_share * total * (1 - 1e-12), side="left")) + 1
    head[order[:n_head]] = True
    return head


def recommendation_counts(topk: np.ndarray, n_items: int) -> np.ndarray:
    """How often each item appears in the lists; [I] int64."""
    return np.bincount(np.asarray(topk, dtype=np.int64).ravel(), minlength=n_items)


def bias_metrics(
    topk: np.ndarray,
    popularity: Any,
    ks: Sequence[int] = DEFAULT_KS,
    head_share: float = HEAD_SHARE,
) -> dict[str, float]:
    """avg_pop, avg_pop_norm, gini, tail_share, coverage @k for each k in ks (module docstring).

    topk: [U, K] item indices, best first (K >= max(ks)); popularity: [I] train counts (the
    catalogue size is I). Keys ``"avg_pop@10", "avg_pop@20", ..., "avg_pop_norm@10", ...``:
    metric-major, in the order of ``BIAS_METRICS`` and ks.
    """
    topk = np.asarray(topk, dtype=np.int64)
    pop = np.asarray(popularity, dtype=np.float64).ravel()
    if topk.ndim != 2 or topk.shape[0] == 0:
        raise ValueError(f"topk must be [U, K] with U >= 1; got shape {topk.shape}")
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1 or max(ks) > topk.shape[1]:
        raise ValueError(f"every k must be in [1, {topk.shape[1]}]; got {ks}")
    if topk.size and (topk.min() < 0 or topk.max() >= pop.size):
        raise ValueError(f"topk holds items outside the catalogue of {pop.size} popularity counts")
    head = head_mask(pop, head_share)
    max_pop = pop.max() if pop.size else 0.0
    out: dict[str, float] = {}
    for k in ks:
        slots = topk[:, :k]
        counts = recommendation_counts(slots, pop.size)
        avg = float(pop[slots].mean())
        values = {
            "avg_pop": avg,
            "avg_pop_norm": avg / max_pop if max_pop > 0 else 0.0,
            "gini": gini(counts),
            "tail_share": float(1.0 - head[slots].mean()),
            "coverage": float(np.count_nonzero(counts) / pop.size),
        }
        for name in BIAS_METRICS:
            out[f"{name}@{k}"] = values[name]
    return {key: out[key] for key in (f"{m}@{k}" for m in BIAS_METRICS for k in ks)}
