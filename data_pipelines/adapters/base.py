"""What an adapter hands to the ingest: files of records and side tables.

An adapter knows one raw format. For each interaction file it gives the
``Dialect`` (how to cut lines into fields) and a ``transform`` from the string
fields to canonical rows. Everything else — accounting, common checks,
quarantine, dedupe, ``seq``, id maps, atomic publication — is the ingest's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from data_pipelines.lines import LINE, Chunk, Dialect, empty_rejects, read_chunks
from data_pipelines.schema import INTERACTIONS, polars_schema

#: Canonical interaction columns an adapter produces (``seq`` is assigned by the ingest).
ROW_COLUMNS = [f.name for f in INTERACTIONS if f.name != "seq"]
ROW_SCHEMA = {k: v for k, v in polars_schema(INTERACTIONS).items() if k != "seq"}

Transform = Callable[[pl.DataFrame], pl.DataFrame]


@dataclass
class FileSpec:
    """One input file: how to read its records and turn them into canonical rows.

    ``transform(fields)`` returns the canonical row columns (``ROW_COLUMNS``) plus
    ``__line`` (source line), ``__ord`` (row ordinal within the line, when a line
    yields several rows) and ``__reason`` (null if the adapter accepts the row);
    optionally ``__context`` (list<struct<key, value>>) for the contexts table.
    """

    path: Path
    transform: Transform
    dialect: Dialect | None = None  # None: a parquet file with the canonical columns
    #: Records are deduplicated by their raw text within a scope: files whose lines mean
    #: different things (Coat's self-selected vs random ratings) get different scopes.
    scope: str = ""

    def chunks(self) -> Iterator[Chunk]:
        if self.dialect is not None:
            yield from read_chunks(self.path, self.dialect)
            return
        line = 1
        for batch in pq.ParquetFile(self.path).iter_batches(batch_size=1 << 20):
            df = pl.from_arrow(batch)
            assert isinstance(df, pl.DataFrame)
            n = df.height
            df = df.with_columns(pl.int_range(line, line + n, dtype=pl.Int64).alias(LINE))
            raw = pl.struct([c for c in df.columns if c != LINE]).struct.json_encode()
            yield Chunk(df, empty_rejects(), n, raw)
            line += n


@dataclass
class Source:
    """Everything one ingest reads from one source."""

    name: str
    files: list[FileSpec]
    items: pl.DataFrame | None = None  # item_id, category, attributes, price
    users: pl.DataFrame | None = None  # user_id, features
    observation_propensities: pl.DataFrame | None = None  # user_id, item_id, propensity
    notes: list[str] = field(default_factory=list)


def nonempty(expr: pl.Expr) -> pl.Expr:
    """Turn '' into null; ids and labels are otherwise kept exactly as given."""
    return pl.when(expr.str.len_bytes() == 0).then(None).otherwise(expr)


def finish(df: pl.DataFrame, *reasons: pl.Expr) -> pl.DataFrame:
    """Add missing canonical columns as nulls, the first reason, and order the columns."""
    from data_pipelines.validate import ORD, REASON

    missing = [pl.lit(None, dtype=t).alias(c) for c, t in ROW_SCHEMA.items() if c not in df.columns]
    df = df.with_columns(missing)
    if ORD not in df.columns:
        df = df.with_columns(pl.lit(0, dtype=pl.Int32).alias(ORD))
    reason = pl.coalesce([*reasons, pl.lit(None, dtype=pl.String)]) if reasons else pl.lit(None, pl.String)
    df = df.with_columns(reason.alias(REASON))
    extra = [c for c in ("__context",) if c in df.columns]
    return df.select(
        [pl.col(c).cast(t) for c, t in ROW_SCHEMA.items()]
        + [pl.col(LINE), pl.col(ORD).cast(pl.Int32), pl.col(REASON)]
        + extra
    )


def rating_rows(fields: pl.DataFrame, **extra: tuple[pl.Expr, pl.Expr | None]) -> pl.DataFrame:
    """``rate`` rows from ``user``, ``item``, ``rating`` string fields.

    ``extra`` adds canonical columns as ``name=(value, reason or None)``, e.g. a parsed
    ``ts`` with its parse-failure reason, or a constant ``logging_policy``.
    """
    from data_pipelines.validate import number

    cols = {"value": number("rating"), **extra}
    reasons = {f"__why_{k}": r for k, (_, r) in cols.items() if r is not None}
    return finish(
        fields.select(
            LINE,
            nonempty(pl.col("user")).alias("user_id"),
            nonempty(pl.col("item")).alias("item_id"),
            pl.lit("rate").alias("event"),
            *(v.alias(k) for k, (v, _) in cols.items()),
            *(r.alias(k) for k, r in reasons.items()),
        ),
        *(pl.col(k) for k in reasons),
    )
