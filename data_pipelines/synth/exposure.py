"""The logging policy: slates drawn from realised counts (rich get richer), and the Gini index."""

from __future__ import annotations

import numpy as np

REDRAW_PASSES = 32  # then the few slates still repeating an item are drawn exactly (Gumbel top-k)


def popularity_weights(clicks: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """w_i = (clicks_i / mean(clicks) + alpha) ** beta, normalised to sum to 1; [I] float64.

    Clicks are taken relative to the catalogue mean so the dynamics do not depend on
    the number of users; uniform while nothing has been clicked. ``beta`` > 1 makes the
    feedback super-linear, so exposure concentrates round after round.
    """
    mean = clicks.mean()
    rel = clicks / mean if mean > 0 else np.zeros(clicks.shape)
    w = (rel + alpha) ** beta
    return w / w.sum()


def sample_slates(rng: np.random.Generator, p: np.ndarray, n: int, k: int) -> np.ndarray:
    """``n`` slates of ``k`` distinct items, each slot drawn with probability ``p`` ([I], sums to 1).

    Every slot is drawn independently; a slot repeating an item already earlier in its
    slate is redrawn until the slate is distinct (successive sampling without
    replacement). Vectorised: each pass redraws only the repeated slots. Slates still
    repeating after ``REDRAW_PASSES`` (a slate nearly as long as the catalogue, very
    skewed ``p``) are drawn by Gumbel top-k (Plackett-Luce). Returns [n, k] int64.
    """
    if k > p.size or np.count_nonzero(p) < k:
        raise ValueError(f"cannot draw {k} distinct items from {np.count_nonzero(p)} with positive weight")
    cum = np.cumsum(p)
    cum /= cum[-1]

    def draw(size: int | tuple[int, ...]) -> np.ndarray:
        idx = np.searchsorted(cum, rng.random(size), side="right")
        return np.minimum(idx, p.size - 1)

    slates = draw((n, k))
    rows = np.arange(n)
    for _ in range(REDRAW_PASSES):
        sub = slates[rows]
        order = np.argsort(sub, axis=1, kind="stable")  # ties keep slot order: the first copy is kept
        srt = np.take_along_axis(sub, order, axis=1)
        dup = np.zeros_like(sub, dtype=bool)
        np.put_along_axis(dup, order[:, 1:], srt[:, 1:] == srt[:, :-1], axis=1)
        r, c = np.nonzero(dup)
        if r.size == 0:
            return slates
        slates[rows[r], c] = draw(r.size)
        rows = rows[np.unique(r)]
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    step = max(1, (1 << 22) // p.size)  # bound the [rows, I] key matrix
    for lo in range(0, rows.size, step):
        chunk = rows[lo : lo + step]
        keys = logp + rng.gumbel(size=(chunk.size, p.size))
        slates[chunk] = np.argsort(-keys, axis=1, kind="stable")[:, :k]
    return slates


def gini(x: np.ndarray) -> float:
    """Gini index of non-negative amounts (0 = all equal, -> 1 = one holds everything)."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    n, total = x.size, x.sum()
    if n == 0 or total == 0:
        return 0.0
    ranks = np.arange(1, n + 1)
    return float(2.0 * np.sum(ranks * x) / (n * total) - (n + 1) / n)
