"""The user's profile summary an LLM is prompted with, read from the reward model's interest side.

The ``profile_items`` catalogue items of highest interest for the user (the reward model's
``score_matrix``; cold users through their profile) vote for their category and attributes;
the summary names the most frequent ones (ties: alphabetical) and the cold flag. Warm users'
summaries are cached (they never change for a reward version); cold ones are not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from parpo.env.cache import BoundedCache
from parpo.env.catalogue import Catalogue
from parpo.env.reward_model import RewardModel
from parpo.env.tasks import Task

#: Cached warm users' summaries (least recently used evicted past this).
PROFILE_CACHE_LIMIT = 100_000


@dataclass(frozen=True)
class Profile:
    categories: tuple[str, ...]
    attributes: tuple[str, ...]
    cold: bool

    def to_json(self) -> dict[str, object]:
        return {
            "top_categories": list(self.categories),
            "top_attributes": list(self.attributes),
            "cold": self.cold,
        }


def top_names(names: Sequence[str], n: int) -> tuple[str, ...]:
    """The ``n`` most frequent of ``names`` (ties broken alphabetically)."""
    counts = Counter(names)
    return tuple(sorted(counts, key=lambda k: (-counts[k], k))[:n])


def summarise(catalogue: Catalogue, interest: np.ndarray, scored: np.ndarray, n_items: int,
              n_categories: int, n_attributes: int, cold: bool) -> Profile:  # fmt: skip
    """``interest`` [n_items_catalogue] of one user, ``scored`` [n] bool: the items the model scores."""
    rows = np.flatnonzero(scored)
    top = rows[np.argsort(-interest[rows], kind="stable")[:n_items]]
    cats = [catalogue.categories[c] for c in catalogue.cat[top].tolist() if c >= 0]
    picked = np.isin(catalogue.attr_rows, top)
    attrs = [catalogue.attributes[a] for a in catalogue.attr_codes[picked].tolist()]
    return Profile(top_names(cats, n_categories), top_names(attrs, n_attributes), cold)


class Profiler:
    """``profiles(tasks) -> [Profile]``, one reward-model call for the batch's distinct misses."""

    def __init__(self, reward_model: RewardModel, catalogue: Catalogue, n_items: int, n_categories: int,
                 n_attributes: int) -> None:  # fmt: skip
        self.reward_model, self.catalogue = reward_model, catalogue
        self.sizes = (n_items, n_categories, n_attributes)
        self._cache: BoundedCache[tuple[str, tuple[str, ...] | None, bool], Profile] = BoundedCache(
            PROFILE_CACHE_LIMIT
        )

    def _compute(self, keys: list[tuple[str, tuple[str, ...] | None, bool]]) -> list[Profile]:
        prof = {u: list(p) for u, p, _ in keys if p is not None}
        s = self.reward_model.score_matrix(
            [u for u, _, _ in keys], list(self.catalogue.item_ids), prof or None
        )
        scored = ~np.asarray(s["cold_item"], dtype=bool)
        return [
            summarise(self.catalogue, np.asarray(s["interest"][j]), scored, *self.sizes, cold=c)
            for j, (_, _, c) in enumerate(keys)
        ]

    def profiles(self, tasks: Sequence[Task]) -> list[Profile]:
        keys = [(t.user_id, t.profile, t.cold) for t in tasks]
        return self._cache.lookup(keys, self._compute, keep=lambda k: k[1] is None)
