"""Per-user Spearman correlation between learned and true scores (synthetic data).

On the synthetic generator the true interest s(u, i) and conformity c_u of every user are known
(``data_pipelines.synth.Truth``). For each user, n = 200 random items are drawn
(``sample_items_per_user``); the model's interest (conformity) score of those items is ranked
against the truth, and the per-user Spearman correlations are averaged over users:
``synthetic.interest_spearman`` and ``synthetic.conformity_spearman``. See docs/metrics.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Users per block of ``sample_items_per_user``; block b draws from ``default_rng([seed, b])``.
SAMPLE_BLOCK_USERS = 4096


def average_ranks(x: Any) -> np.ndarray:
    """Ranks 1..n along the last axis, ties given their average rank; [U, n] float64.

    Same as ``scipy.stats.rankdata(x, method="average", axis=1)`` for finite x, fully
    vectorised: sort each row, find runs of equal values, give each run the mean of its
    positions.
    """
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    n_rows, n = x.shape
    order = np.argsort(x, axis=1, kind="stable")
    s = np.take_along_axis(x, order, axis=1)
    pos = np.broadcast_to(np.arange(n), (n_rows, n))
    starts = np.ones((n_rows, n), dtype=bool)
    starts[:, 1:] = s[:, 1:] != s[:, :-1]
    ends = np.ones((n_rows, n), dtype=bool)
    ends[:, :-1] = starts[:, 1:]
    first = np.maximum.accumulate(np.where(starts, pos, 0), axis=1)
    last = np.minimum.accumulate(np.where(ends, pos, n)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty_like(x)
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=1)
    return ranks


def per_user_spearman(learned: Any, true: Any) -> np.ndarray:
    """Spearman correlation of each row of learned [U, n] with the same row of true [U, n];
    [U] float64, NaN where it is undefined (a constant row on either side, or a non-finite
    value in the row).

    Pearson correlation of average ranks (ties averaged, as ``scipy.stats.spearmanr``).
    """
    a = np.atleast_2d(np.asarray(learned, dtype=np.float64))
    b = np.atleast_2d(np.asarray(true, dtype=np.float64))
    if a.shape != b.shape:
        raise ValueError(f"learned {a.shape} and true {b.shape} must have the same shape [U, n]")
    finite = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
    ra = average_ranks(np.where(np.isfinite(a), a, 0.0))
    rb = average_ranks(np.where(np.isfinite(b), b, 0.0))
    ra -= ra.mean(axis=1, keepdims=True)
    rb -= rb.mean(axis=1, keepdims=True)
    denom = np.sqrt((ra * ra).sum(axis=1) * (rb * rb).sum(axis=1))
    ok = finite & (denom > 0)
    rho = np.full(a.shape[0], np.nan)
    rho[ok] = (ra * rb).sum(axis=1)[ok] / denom[ok]
    return np.clip(rho, -1.0, 1.0)


def mean_user_spearman(learned: Any, true: Any) -> tuple[float, dict[str, int]]:
    """Mean over users of the per-user Spearman correlation of learned [U, n] with true [U, n].

    Users whose correlation is undefined (constant row on either side, non-finite values) are
    skipped. Returns (mean, {"n_users": users averaged, "n_skipped": users skipped}); the mean
    is NaN when every user is skipped.
    """
    rho = per_user_spearman(learned, true)
    ok = ~np.isnan(rho)
    mean = float(rho[ok].mean()) if ok.any() else float("nan")
    return mean, {"n_users": int(ok.sum()), "n_skipped": int((~ok).sum())}


def synthetic_spearman(
    learned_interest: Any,
    true_interest: Any,
    learned_conformity: Any = None,
    true_conformity: Any = None,
) -> dict[str, float]:
    """``synthetic.interest_spearman`` (and ``synthetic.conformity_spearman`` when both
    conformity arrays are given), each with ``..._users`` and ``..._skipped`` counts.

    All arrays are [U, n]: scores of the same n sampled items per user (``sample_items_per_user``).
    The true interest is s(u, i); the true conformity of a pair is c_u * pop_i, the conformity
    term of the click logit, which per user ranks items by pop_i (users with c_u = 0 are
    constant rows and skipped).
    """
    out: dict[str, float] = {}
    pairs = {
        "interest": (learned_interest, true_interest),
        "conformity": (learned_conformity, true_conformity),
    }
    for name, (learned, true) in pairs.items():
        if learned is None or true is None:
            continue
        mean, info = mean_user_spearman(learned, true)
        out[f"synthetic.{name}_spearman"] = mean
        out[f"synthetic.{name}_spearman_users"] = float(info["n_users"])
        out[f"synthetic.{name}_spearman_skipped"] = float(info["n_skipped"])
    return out


def sample_items_per_user(n_users: int, n_items: int, n: int = 200, seed: int = 0) -> np.ndarray:
    """n distinct items per user drawn uniformly without replacement, sorted; [U, n] int64.

    Users go in blocks of ``SAMPLE_BLOCK_USERS``, block b drawing from ``default_rng([seed, b])``,
    so a user's row depends on the seed and the user's position only. Where n is small against
    the catalogue (``4 n <= n_items``) a row is the first n distinct values of i.i.d. uniform
    draws (a uniformly random n-subset; a row short of n distinct values is drawn again): O(n)
    per user, not O(n_items). Otherwise it is the n smallest of n_items uniform random keys.
    """
    if not 1 <= n <= n_items:
        raise ValueError(f"n must be in [1, {n_items}] (the number of items); got {n}")
    out = np.empty((n_users, n), dtype=np.int64)
    for b, start in enumerate(range(0, n_users, SAMPLE_BLOCK_USERS)):
        rng = np.random.default_rng([seed, b])
        rows = min(SAMPLE_BLOCK_USERS, n_users - start)
        chosen = (
            _first_distinct(rng, rows, n_items, n)
            if 4 * n <= n_items
            else _smallest_keys(rng, rows, n_items, n)
        )
        out[start : start + rows] = np.sort(chosen, axis=1)
    return out


def _first_distinct(rng: np.random.Generator, rows: int, n_items: int, n: int) -> np.ndarray:
    """[rows, n]: each row the first n distinct values of uniform draws from [0, n_items)."""
    m = n + 2 * (n * n // n_items) + 16  # about n^2 / (2 n_items) draws repeat an earlier one
    out = np.empty((rows, n), dtype=np.int64)
    todo = np.arange(rows)
    while todo.size:
        draws = rng.integers(0, n_items, size=(todo.size, m))
        order = np.argsort(draws, axis=1, kind="stable")  # equal values keep their draw order
        ranked = np.take_along_axis(draws, order, axis=1)
        repeat = np.zeros(draws.shape, dtype=bool)
        np.put_along_axis(repeat, order[:, 1:], ranked[:, 1:] == ranked[:, :-1], axis=1)
        enough = (~repeat).sum(axis=1) >= n
        first = np.argsort(repeat[enough], axis=1, kind="stable")[:, :n]  # distinct ones, in draw order
        out[todo[enough]] = np.take_along_axis(draws[enough], first, axis=1)
        todo = todo[~enough]
    return out


def _smallest_keys(rng: np.random.Generator, rows: int, n_items: int, n: int) -> np.ndarray:
    """[rows, n]: each row the n smallest of n_items uniform random keys (a random n-subset)."""
    keys = rng.random((rows, n_items))
    return np.argpartition(keys, n - 1, axis=1)[:, :n] if n < n_items else np.argsort(keys, axis=1)
