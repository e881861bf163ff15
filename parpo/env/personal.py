"""The reward model's view of every catalogue item for one user (its *personal table*): what a
policy may add to each candidate. The native backend appends the table's rows to its candidate
features (``parpo.policy.features``); the LLM backend renders them in each candidate of
``Observation.to_json(personal=...)``. The environment itself never needs it (it rewards slates
through the ``PreferenceModel`` alone).

    tables = PersonalTables(reward_model, catalogue)
    (table,) = tables.lookup([(user_id, profile)])  # [n_items, 4] PERSONAL_FEATURES
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from parpo.env.cache import BoundedCache
from parpo.env.catalogue import Catalogue
from parpo.env.reward_model import RewardModel

#: The columns of a personal table.
PERSONAL_FEATURES: tuple[str, ...] = ("rm_interest_pct", "rm_interest_z", "rm_conformity_z", "rm_scored")
#: Neutral values of an item the reward model cannot score (median, mean, mean, not scored).
NEUTRAL = np.array([0.5, 0.0, 0.0, 0.0], dtype=np.float32)
#: Cached per-user tables hold at most this many cells (users x items x features) in all.
PERSONAL_CACHE_CELLS = 1 << 24
#: Scores per reward-model call when building tables (users x catalogue items), so many users
#: against a large catalogue stay a few MiB at a time.
PERSONAL_MAX_PAIRS = 1 << 21

#: A table's key: the user and, for a cold user, the profile items it is scored through.
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
    """``lookup(keys) -> [table]``: one ``score_matrix`` of users x the whole catalogue per batch
    of misses (at most ``PERSONAL_MAX_PAIRS`` scores per call); warm users' tables are cached
    (they never change for a reward version), cold ones are not (serving sees endless profiles)."""

    def __init__(self, reward_model: RewardModel, catalogue: Catalogue) -> None:
        self.reward_model, self.catalogue = reward_model, catalogue
        self._cache: BoundedCache[UserKey, np.ndarray] = BoundedCache(
            max(1, PERSONAL_CACHE_CELLS // max(len(catalogue) * len(PERSONAL_FEATURES), 1))
        )

    def _compute(self, todo: Sequence[UserKey]) -> list[np.ndarray]:
        items = list(self.catalogue.item_ids)
        per_call = max(1, PERSONAL_MAX_PAIRS // max(len(items), 1))
        out = []
        for start in range(0, len(todo), per_call):
            chunk = todo[start : start + per_call]
            prof = {u: list(p) for u, p in chunk if p is not None}
            s = self.reward_model.score_matrix([u for u, _ in chunk], items, prof or None)
            out += [
                personal_table(s["interest"][j], s["conformity"][j], ~s["cold_item"])
                for j in range(len(chunk))
            ]
        return out

    def lookup(self, keys: Sequence[UserKey]) -> list[np.ndarray]:
        """[n_items, 4] ``PERSONAL_FEATURES`` per key."""
        return self._cache.lookup(list(keys), self._compute, keep=lambda k: k[1] is None)
