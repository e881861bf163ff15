"""Produce the next item of an iterator in a background thread while the caller works on this one.

The ingest's stages are polars, numpy and pyarrow calls, which release the GIL, so parsing
chunk i+1 overlaps the checks of chunk i on a second core. At most one item is produced
ahead, so memory grows by one item.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
_END = object()


def prefetch(items: Iterable[T]) -> Iterator[T]:
    """Yield the items of ``items`` in order, producing each next one in a background thread.

    An exception raised while producing an item is raised here, where that item would have
    been yielded. If the caller stops early, the item in production is finished and dropped.
    """
    it = iter(items)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch") as pool:
        ahead = pool.submit(next, it, _END)
        while True:
            item = ahead.result()
            if item is _END:
                return
            ahead = pool.submit(next, it, _END)
            yield item
