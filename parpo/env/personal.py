"""The reward model's view of every catalogue item for one user (``PersonalTables``): the
``personal`` search strategy ranks by it, and the native policy reads it as candidate features.

A user's table is [n_items, 4] float32, ``PERSONAL_FEATURES`` per catalogue row: the interest
percentile among the scored items (what ``personal`` ranks by), the interest and conformity
z-scores and a ``scored`` flag; items the reward model cannot score get ``NEUTRAL``. Warm
users' tables are cached (they never change for a reward version), cold users' are not
(serving sees endless profiles).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from parpo.env.cache import BoundedCache
from parpo.env.catalogue import Catalogue
from parpo.env.reward_model import RewardModel

#: The reward model's view of a candidate for this user (``personal_table``).
PERSONAL_FEATURES: tuple[str, ...] = ("rm_interest_pct", "rm_interest_z", "rm_conformity_z", "rm_scored")
#: Neutral values of an item the reward model cannot score (median, mean, mean, not scored).
NEUTRAL = np.array([0.5, 0.0, 0.0, 0.0], dtype=np.float32)
#: Cached tables hold at most this many cells (users x items x features) in all.
PERSONAL_CACHE_CELLS = 1 << 24
#: (user, item) pairs per reward-model call when building tables (a batch of users x a large
#: catalogue would otherwise gather every pair's vectors at once).
PERSONAL_MAX_PAIRS = 1 << 21
#: (user id, profile of a cold user or None).
UserKey = tuple[str, tuple[str, ...] | None]


def personal_table(interest: np.ndarray, conformity: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """[n_items, 4] float32 ``PERSONAL_FEATURES`` of one user from the reward model's scores of
    every catalogue item ([n_items] each; ``scored`` false where the model has no vector).

    Percentile: rank of the interest among the scored items in [0, 1] (ties share the lower
    rank), so it means the same for every user whatever the scale of their scores; z-scores
    standardise over the scored items. Unscored items get ``NEUTRAL``.
    """
    out = np.tile(NEUTRAL, (interest.size, 1))
    s = np.flatnonzero(scored)
    if s.size == 0:
        return out
    vi, vc = interest[s].astype(np.float64), conformity[s].astype(np.float64)
    below = np.searchsorted(np.sort(vi), vi, side="left")
    out[s, 0] = below / max(s.size - 1, 1)
    out[s, 1] = (vi - vi.mean()) / (vi.std() or 1.0)
    out[s, 2] = (vc - vc.mean()) / (vc.std() or 1.0)
    out[s, 3] = 1.0
    return out


class PersonalTables:
    """``lookup(keys)``: one ``personal_table`` per (user, profile), cached for warm users."""

    def __init__(self, reward_model: RewardModel, catalogue: Catalogue) -> None:
        self.reward_model, self.catalogue = reward_model, catalogue
        limit = max(1, PERSONAL_CACHE_CELLS // max(len(catalogue) * len(PERSONAL_FEATURES), 1))
        self._cache: BoundedCache[UserKey, np.ndarray] = BoundedCache(limit)

    def lookup(self, keys: Sequence[UserKey]) -> list[np.ndarray]:
        return self._cache.lookup(keys, self._tables, keep=lambda k: k[1] is None)

    def _tables(self, todo: Sequence[UserKey]) -> list[np.ndarray]:
        """Reward-model calls over the whole catalogue, at most ``PERSONAL_MAX_PAIRS`` pairs each."""
        items = list(self.catalogue.item_ids)
        n = len(items)
        per_call = max(1, PERSONAL_MAX_PAIRS // max(n, 1))
        out = []
        for start in range(0, len(todo), per_call):
            chunk = todo[start : start + per_call]
            prof = {u: list(p) for u, p in chunk if p is not None}
            s = self.reward_model.score(
                [u for u, _ in chunk for _ in range(n)], items * len(chunk), prof or None
            )
            out += [
                personal_table(
                    s["interest"][j * n : (j + 1) * n],
                    s["conformity"][j * n : (j + 1) * n],
                    ~s["cold_item"][j * n : (j + 1) * n],
                )
                for j in range(len(chunk))
            ]
        return out
