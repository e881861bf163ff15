"""Split protocols by name, and which of them apply to which source."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from data_pipelines.dataset import Dataset
from data_pipelines.splits.prepare import Prepared
from parpo_core.names import NameRegistry

#: A protocol: the prepared data in, named parts out (train, valid, test, and
#: cold_profile/cold_test where the protocol sets cold users aside). Parts may
#: carry helper columns (``__*``); the store keeps the canonical ones.
SplitFn = Callable[[Prepared], dict[str, pl.DataFrame]]

SPLITS: NameRegistry[SplitFn] = NameRegistry("split")

#: The protocols for datasets made of user histories.
HISTORY_SPLITS = ["temporal", "intervened", "cold_users", "cold_items"]

#: Which splits each source gets (what ``write_all`` writes). Coat has no
#: timestamps and its ``seq`` is file order (by item id), so "the last
#: positive" would mean "the highest item id": no ``temporal``. OBD is
#: anonymous impressions: only its logs kept apart (``native``).
APPLICABLE: dict[str, list[str]] = {
    "taobao": HISTORY_SPLITS,
    "amazon-s3rec": HISTORY_SPLITS,
    "movielens": HISTORY_SPLITS,
    "canonical": HISTORY_SPLITS,
    "synthetic": HISTORY_SPLITS,
    "coat": ["native", "intervened", "cold_users", "cold_items"],
    "obd": ["native"],
}


register = SPLITS.register


def applicable_for(source: str) -> list[str]:
    """The split names that apply to datasets of ``source`` (unknown sources: the history splits)."""
    return list(APPLICABLE.get(source, HISTORY_SPLITS))


def applicable_splits(dataset: Dataset) -> list[str]:
    """The split names that apply to ``dataset`` (by its source), in a fixed order."""
    return applicable_for(dataset.source)
