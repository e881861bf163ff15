"""Train/valid/test splits of a canonical dataset, written next to it.

``DIR/splits/<name>/<seed>-<rule-hash>/`` holds ``meta.json`` and one parquet
file per part. Protocols (``SPLITS``): ``temporal``, ``intervened``
(RecBole-Debias), ``cold_users``, ``cold_items``, ``native``; which apply to a
dataset depends on its source (``applicable_splits``). See docs/splits.md.
"""

from data_pipelines.splits import protocols as _protocols  # noqa: F401  (fills SPLITS)
from data_pipelines.splits.prepare import Prepared
from data_pipelines.splits.registry import (
    HISTORY_SPLITS,
    SPLITS,
    SplitFn,
    applicable_for,
    applicable_splits,
)
from data_pipelines.splits.rule import PositivesRule
from data_pipelines.splits.store import (
    Split,
    compute_split,
    load_split,
    read_split,
    split_dir,
    train_popularity,
    write_all,
    write_split,
)

__all__ = [
    "HISTORY_SPLITS",
    "SPLITS",
    "PositivesRule",
    "Prepared",
    "Split",
    "SplitFn",
    "applicable_for",
    "applicable_splits",
    "compute_split",
    "load_split",
    "read_split",
    "split_dir",
    "train_popularity",
    "write_all",
    "write_split",
]
