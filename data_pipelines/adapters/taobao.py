"""Taobao UserBehavior (Tianchi 649): ``user,item,category,behavior,unix_ts``, no header.

Mapping: pv -> view, cart -> cart, fav -> fav, buy -> buy; ``category`` goes to
the row and to the item table. ``--input`` is one CSV file or a folder of them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from data_pipelines.adapters.base import FileSpec, Source, finish, nonempty
from data_pipelines.lines import LINE, Dialect
from data_pipelines.validate import parse_ts, resolve_ts_format
from parpo_core.errors import DataError

EVENTS = {"pv": "view", "cart": "cart", "fav": "fav", "buy": "buy"}
DIALECT = Dialect(("user", "item", "category", "behavior", "ts"), quote=None)


def rows(fields: pl.DataFrame) -> pl.DataFrame:
    ts, ts_reason = parse_ts("ts", resolve_ts_format(fields["ts"], "unix"))
    behavior = nonempty(pl.col("behavior"))
    return finish(
        fields.select(
            LINE,
            nonempty(pl.col("user")).alias("user_id"),
            nonempty(pl.col("item")).alias("item_id"),
            nonempty(pl.col("category")).alias("category"),
            behavior.replace(EVENTS).alias("event"),
            ts.alias("ts"),
            ts_reason.alias("__ts_reason"),
        ),
        pl.col("__ts_reason"),
        pl.when(pl.col("ts").is_null()).then(pl.lit("timestamp is empty")),
    )


def source(path: Path) -> Source:
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise DataError(f"{path}: no Taobao CSV file (expected a .csv file or a folder of them)")
    return Source("taobao", [FileSpec(f, rows, DIALECT) for f in files])
