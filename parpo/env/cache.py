"""A bounded least-recently-used map filled in batches: the caches of the environment (preference
rewards per user and slate), the featurizer (user vectors) and serving (agents per temperature).

A batch lookup answers from the hits and the freshly computed misses *before* evicting, so an
entry the current call needs is never lost to eviction (the issue-24 crash: a cache emptied after
its hits were left out of the work list); eviction then drops the least recently used entries
until at most ``limit`` remain.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"cache limit must be at least 1, got {limit}")
        self.limit = limit
        self._data: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def lookup(
        self,
        keys: Sequence[K],
        compute: Callable[[list[K]], Sequence[V]],
        keep: Callable[[K], bool] | None = None,
    ) -> list[V]:
        """The values of ``keys`` [B] in order. The distinct misses (first-seen order) are computed
        in one ``compute(misses) -> values`` call; those for which ``keep`` holds (default: all)
        are stored."""
        found: dict[K, V] = {}
        for k in keys:
            if k not in found and k in self._data:
                self._data.move_to_end(k)
                found[k] = self._data[k]
        todo = list(dict.fromkeys(k for k in keys if k not in found))
        if todo:
            fresh = dict(zip(todo, compute(todo), strict=True))
            found.update(fresh)
            self._data.update((k, v) for k, v in fresh.items() if keep is None or keep(k))
            while len(self._data) > self.limit:
                self._data.popitem(last=False)
        return [found[k] for k in keys]
