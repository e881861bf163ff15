"""Train/valid/test splits of a canonical dataset, written next to it.

``DIR/splits/<name>/<seed>-<rule-hash>[-a<algorithm>]/`` holds ``meta.json`` and
one parquet file per part. Protocols (``SPLITS``): ``temporal``, ``intervened``
(RecBole-Debias), ``cold_users``, ``cold_items``, ``native``; which apply to a
dataset depends on its source (``applicable_splits``). Algorithms
(``ALGORITHMS``): 1 assigns positive rows, 2 (``ALGORITHM``, the default)
(user, item) pairs with all their rows. See docs/splits.md.
"""

from data_pipelines.splits import protocols as _protocols  # noqa: F401  (fills SPLITS)
from data_pipelines.splits.overlap import pair_overlap
from data_pipelines.splits.prepare import ALGORITHM, ALGORITHMS, Prepared
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
    meta_algorithm,
    read_split,
    split_dir,
    train_popularity,
    write_all,
    write_split,
)

__all__ = [
    "ALGORITHM",
    "ALGORITHMS",
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
    "meta_algorithm",
    "pair_overlap",
    "read_split",
    "split_dir",
    "train_popularity",
    "write_all",
    "write_split",
]
