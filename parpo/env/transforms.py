"""Per-user transforms of the preference reward (``PreferenceTransform``, applied in
``BatchEnv._finish`` after the reward model and its cache): the heterogeneous-user and
level-drift settings of the PARPO / GDPO / GRPO comparison (issue 7, benchmarks/policy_compare.py).

A user's group is a hash of its id (blake2b, not Python's salted ``hash``), so the assignment is
the same in every process and run. Noise is drawn from a generator seeded by (seed, call index):
a transform replays exactly when it sees the same calls in the same order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


def user_bucket(user_id: str, n: int, seed: int = 0) -> int:
    """A stable bucket in ``[0, n)`` for ``user_id`` (uniform over users, independent of order)."""
    h = hashlib.blake2b(f"{seed}:{user_id}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") % n


class HeteroScale:
    """``a_u * preference + N(0, sigma^2)`` with ``a_u`` one of ``scales`` per user (hash-stable).

    ``sigma`` is the same for every user, so low-scale users have a low signal-to-noise ratio
    (the reward model's output lies in [0, 1]: a 0.1-scale user's spread is ~0.1 of the others').
    """

    def __init__(self, scales: Sequence[float] = (0.1, 1.0, 10.0), sigma: float = 0.1, seed: int = 0) -> None:
        self.scales = np.asarray(scales, dtype=np.float64)
        self.sigma, self.seed = float(sigma), seed
        self.calls = 0

    def scale(self, user_id: str) -> float:
        return float(self.scales[user_bucket(user_id, len(self.scales), self.seed)])

    def __call__(self, user_ids: Sequence[str], preference: np.ndarray) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.calls])
        self.calls += 1
        a = np.array([self.scale(u) for u in user_ids])
        return a * preference + rng.normal(0.0, self.sigma, size=len(user_ids))


class LevelDrift:
    """Adds ``shift`` to the preference of a hash-stable ``fraction`` of users once ``step`` has
    reached ``at``; the owner advances ``step`` (the benchmark: once per policy update)."""

    def __init__(self, at: int, shift: float = -0.3, fraction: float = 0.5, seed: int = 0) -> None:
        self.at, self.shift, self.fraction, self.seed = at, float(shift), fraction, seed
        self.step = 0

    def drifts(self, user_id: str) -> bool:
        return user_bucket(user_id, 1000, self.seed) < round(self.fraction * 1000)

    def __call__(self, user_ids: Sequence[str], preference: np.ndarray) -> np.ndarray:
        if self.step < self.at:
            return preference
        return preference + self.shift * np.array([self.drifts(u) for u in user_ids], dtype=np.float64)
