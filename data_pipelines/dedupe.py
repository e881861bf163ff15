"""Exact record dedupe state: 128-bit keys kept as sorted runs of numpy arrays.

Each chunk's new keys become one sorted run (two uint64 arrays); membership is
a ``searchsorted`` per run. Memory is 16 bytes per distinct record and nothing
else — no hash table to rebuild as the state grows (polars joins against the
whole key set cost several times that at 20M rows).
"""

from __future__ import annotations

import numpy as np
import polars as pl


class KeySet:
    """A set of (h1, h2) uint64 pairs: ``base`` keys (earlier ingests) plus keys added now."""

    def __init__(self, base: pl.DataFrame | None = None) -> None:
        self._base: list[tuple[np.ndarray, np.ndarray]] = []
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []
        if base is not None and base.height:
            self.add(base["h1"].to_numpy(), base["h2"].to_numpy())
            self._base, self._runs = self._runs, []

    def __len__(self) -> int:
        return sum(len(h1) for h1, _ in self._base + self._runs)

    def add(self, h1: np.ndarray, h2: np.ndarray) -> None:
        if len(h1):
            # Sorted by h1 only: equal h1 values (distinct keys sharing 64 bits) are a
            # contiguous range that ``contains`` scans whole.
            order = np.argsort(h1, kind="stable")
            self._runs.append((h1[order], h2[order]))
        if len(self._runs) > 8:
            self._compact()

    def _compact(self) -> None:
        h1 = np.concatenate([r[0] for r in self._runs])
        h2 = np.concatenate([r[1] for r in self._runs])
        self._runs = []
        self.add(h1, h2)

    def contains(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """bool[n]: which (h1[i], h2[i]) are in the set."""
        # Sorted queries make every searchsorted a cache-friendly merge (~40x faster at 4M keys).
        order = np.argsort(h1, kind="stable")
        q1, q2 = h1[order], h2[order]
        found = np.zeros(len(q1), dtype=bool)
        for r1, r2 in self._base + self._runs:
            lo = np.searchsorted(r1, q1, "left")
            hi = np.searchsorted(r1, q1, "right")
            single = (hi - lo) == 1
            idx = np.minimum(lo, len(r2) - 1)
            found |= single & (r2[idx] == q2)
            for i in np.flatnonzero((hi - lo) > 1):  # equal h1 for distinct keys: ~never
                found[i] |= bool(np.any(r2[lo[i] : hi[i]] == q2[i]))
        out = np.empty_like(found)
        out[order] = found
        return out

    def to_frame(self) -> pl.DataFrame:
        """The keys added since construction (not the base)."""
        if not self._runs:
            return pl.DataFrame(schema={"h1": pl.UInt64, "h2": pl.UInt64})
        return pl.DataFrame(
            {
                "h1": np.concatenate([r[0] for r in self._runs]),
                "h2": np.concatenate([r[1] for r in self._runs]),
            }
        )


def first_new(h1: np.ndarray, h2: np.ndarray, seen: KeySet) -> np.ndarray:
    """bool[n]: keys that are neither in ``seen`` nor repeats of an earlier key in this batch."""
    frame = pl.DataFrame({"h1": h1, "h2": h2})
    first = frame.select(pl.struct("h1", "h2").is_first_distinct()).to_series().to_numpy()
    return first & ~seen.contains(h1, h2)
