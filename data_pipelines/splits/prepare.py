"""The frame every split protocol starts from: rows in order, positives, cold users.

One ``Prepared`` per (dataset, seed, rule, algorithm) is shared by all protocols,
so ``write_all`` reads the data and hashes the users once. The protocols see only the
columns they decide on (``KEYS``); a part's other columns are read for the rows a part
can hold (``Prepared.canonical``), so the log's text columns (sessions, requests,
categories) are never held for every row: on logs where most rows are impressions, that
was most of the splits' memory.

The split algorithm says what ``temporal``, ``intervened`` and ``cold_users``'
valid assign to parts: ``ROWS`` (1) assigns each positive row on its own, so the
click, cart and buy of one (user, item) pair can land in train and test at once
(splits written before algorithms were numbered); ``PAIRS`` (2) assigns each
pair with all its positive rows, a pair's time being its first positive.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from data_pipelines.dataset import Dataset
from data_pipelines.schema import INTERACTIONS, polars_schema
from data_pipelines.splits.hashing import id_hash64, uniform
from data_pipelines.splits.rule import PositivesRule
from parpo_core.errors import DataError

#: Canonical interaction columns, in schema order: what every split part holds.
COLUMNS: list[str] = [f.name for f in INTERACTIONS]

COLD_USER_FRACTION = 0.10
PROFILE_FRACTION = 0.20
PROFILE_MIN_EVENTS = 3

#: Coat's uniformly random ratings are its native test set; the other protocols
#: cut only its self-selected (MNAR) rows, so that held-out set stays clean.
COAT_RANDOM = "uniform_random"

#: Row order within a user: ts (nulls last, as the ingest orders ``seq``), seq, input order.
ORDER = ["user_id", "ts", "seq", "__row"]

#: What the protocols read of every row (with ``__row`` and ``__pos``), and what some sources'
#: ``native`` split reads besides.
KEYS = ["user_id", "item_id", "ts", "seq"]
NATIVE_KEYS = {"coat": ["logging_policy"], "obd": ["logging_policy", "request_id"]}

ROWS, PAIRS = 1, 2
#: The split algorithms (see the module docstring); new splits use ``ALGORITHM``.
ALGORITHMS = (ROWS, PAIRS)
ALGORITHM = PAIRS
PAIR = ["user_id", "item_id"]


@dataclass
class Prepared:
    """All interactions of one dataset, read once, plus what the protocols share.

    ``rows``: every row [N], in ORDER, with the ``KEYS`` columns (and the source's ``NATIVE_KEYS``),
    ``__row`` (input order, int), ``__pos`` (bool: a positive under ``rule``), ``__uh``
    (uint64 user hash under the seed; null for anonymous rows) and ``__cold`` (bool: a cold
    user's row). ``held``: every canonical column of the rows a history part can hold
    (positives, and all of the cold users' rows), with ``__row``. ``algorithm``: ``ROWS`` or
    ``PAIRS``. ``counts``: see ``of_range``.
    """

    dataset: Dataset
    seed: int
    rule: PositivesRule
    rows: pl.DataFrame
    held: pl.DataFrame
    algorithm: int = ALGORITHM
    counts: pl.DataFrame | None = None  # ``item_counts`` of the whole dataset when ``rows`` is one user range

    @classmethod
    def of(
        cls, dataset: Dataset, seed: int = 0, rule: PositivesRule | None = None, algorithm: int = ALGORITHM
    ) -> Prepared:
        check_algorithm(algorithm)
        rule = rule or PositivesRule()
        rows = _key_rows(dataset, seed, rule, dataset.interactions().with_row_index("__row"))
        keep = np.zeros(rows.height, dtype=bool)
        keep[rows.filter(pl.col("__pos") | pl.col("__cold")).get_column("__row").to_numpy()] = True
        return cls(dataset, seed, rule, rows, read_rows(dataset, keep), algorithm)

    @classmethod
    def of_range(
        cls,
        dataset: Dataset,
        path: Path,
        seed: int,
        rule: PositivesRule,
        algorithm: int,
        item_counts: pl.DataFrame,
    ) -> Prepared:
        """One user range of ``dataset`` (``data_pipelines.splits.chunked.spill``): ``path``
        holds every canonical column of the range's rows and their ``__row``; ``item_counts``
        is ``unit_counts`` over the whole dataset, which ``intervened`` weighs units by."""
        check_algorithm(algorithm)
        rows = _key_rows(dataset, seed, rule, pl.scan_parquet(path))
        keep = rows.filter(pl.col("__pos") | pl.col("__cold")).get_column("__row")
        held = pl.scan_parquet(path).filter(pl.col("__row").is_in(keep.implode())).collect()
        return cls(dataset, seed, rule, rows, held, algorithm, item_counts)

    @property
    def source(self) -> str:
        return self.dataset.source

    @property
    def fingerprint(self) -> str:
        return self.dataset.fingerprint

    def canonical(self, part: pl.DataFrame) -> pl.DataFrame:
        """The canonical rows of ``part`` (a protocol's frame, with ``__row``): every column of
        ``COLUMNS``, in ORDER. Taken from ``held``; a part holding other rows (OBD's native
        split keeps its impressions) reads them from the data."""
        idx = part.select("__row")
        # ``held`` has every row a history part can hold; the anti-join is the one check that
        # covers parts built otherwise (OBD's native impressions), without listing protocols here
        if idx.join(self.held.select("__row"), on="__row", how="anti").height:
            mask = np.zeros(self.rows.height, dtype=bool)
            mask[idx.get_column("__row").to_numpy()] = True
            rows = read_rows(self.dataset, mask)
        else:
            rows = self.held.join(idx, on="__row", how="semi")
        return rows.sort(ORDER, nulls_last=True).select(COLUMNS)

    @cached_property
    def history(self) -> pl.DataFrame:
        """Rows with a user (anonymous rows dropped; Coat: self-selected rows only), in ORDER.

        Adds ``__rank`` (0-based event order within the user) and ``__n`` (the user's events).
        """
        df = history_rows(self.rows, self.source)  # in ORDER
        return df.with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).over("user_id").alias("__rank"),
            pl.len().over("user_id").cast(pl.Int64).alias("__n"),
        )

    @cached_property
    def cold_users(self) -> pl.Series:
        """Sorted ids of the cold users (about 10% of users; the same in every split for a seed)."""
        return self.history.filter("__cold").get_column("user_id").unique().sort()

    def cold_parts(self) -> dict[str, pl.DataFrame]:
        """``cold_profile``: each cold user's earliest max(3, ceil(20%)) events (all event
        types); ``cold_test``: the cold user's positives after that profile."""
        cold = self.history.filter("__cold")
        k = pl.max_horizontal(
            pl.lit(PROFILE_MIN_EVENTS, dtype=pl.Int64),
            (pl.col("__n") * PROFILE_FRACTION).ceil().cast(pl.Int64),
        )
        in_profile = pl.col("__rank") < k
        return {
            "cold_profile": cold.filter(in_profile),
            "cold_test": cold.filter(~in_profile & pl.col("__pos")),
        }

    @cached_property
    def warm_positives(self) -> pl.DataFrame:
        """Positives of warm users, in ORDER."""
        return self.history.filter(~pl.col("__cold") & pl.col("__pos"))

    @cached_property
    def warm_units(self) -> pl.DataFrame:
        """What the pair-aware protocols assign, in ORDER: every warm positive (``ROWS``) or
        each warm (user, item) pair's first positive row (``PAIRS``). Adds ``__prank``
        (0-based order among the user's units) and ``__np`` (the user's units)."""
        units = self.warm_positives
        if self.algorithm == PAIRS:
            units = units.filter(pl.struct(PAIR).is_first_distinct())
        return units.with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).over("user_id").alias("__prank"),
            pl.len().over("user_id").cast(pl.Int64).alias("__np"),
        )

    def rows_of(self, units: pl.DataFrame) -> pl.DataFrame:
        """The warm positive rows that ``units`` (rows of ``warm_units``) stand for: the
        units themselves (``ROWS``), every positive row of their pairs (``PAIRS``)."""
        if self.algorithm == ROWS:
            return units
        return self.warm_positives.join(units.select(PAIR), on=PAIR, how="semi")

    @cached_property
    def item_counts(self) -> pl.DataFrame:
        """item_id, count: positive units per item over all history rows (cold users included):
        positive rows (``ROWS``), distinct users (``PAIRS``)."""
        if self.counts is not None:
            return self.counts
        return unit_counts(self.history.filter("__pos"), self.algorithm)

    def row_uniform(self, df: pl.DataFrame, purpose: str) -> pl.Series:
        """Float64 [len(df)] in (0, 1) per (user, seq) of ``df`` (history rows): stable under appends.

        A pair's number is its first positive's, so a dataset with one positive per pair
        gets the same draws, hence the same split, under ``ROWS`` and ``PAIRS``."""
        u = uniform(df.get_column("__uh").to_numpy(), purpose, df.get_column("seq").to_numpy())
        return pl.Series(purpose, u)

    def user_uniform(self, df: pl.DataFrame, purpose: str) -> pl.Series:
        """Float64 [len(df)] in (0, 1), one number per user of ``df`` (history rows)."""
        return pl.Series(purpose, uniform(df.get_column("__uh").to_numpy(), purpose))


def _key_rows(dataset: Dataset, seed: int, rule: PositivesRule, frame: pl.LazyFrame) -> pl.DataFrame:
    """``Prepared.rows`` of ``frame`` (canonical rows with ``__row``)."""
    keys = ["__row", *KEYS, *NATIVE_KEYS.get(dataset.source, []), "__pos"]
    rows = frame.with_columns(rule.is_positive().fill_null(False).alias("__pos")).select(keys).collect()
    rows = rows.sort(ORDER, nulls_last=True)  # ``history`` is then ``rows`` without a copy
    uh = id_hash64(rows.get_column("user_id"), seed)
    cold = uniform(uh.fill_null(0).to_numpy(), "cold_users") < COLD_USER_FRACTION
    return rows.with_columns(uh.alias("__uh"), (pl.Series(cold) & uh.is_not_null()).alias("__cold"))


def history_rows(rows: pl.DataFrame, source: str) -> pl.DataFrame:
    """The rows of ``rows`` a history protocol reads: those with a user (Coat: self-selected only)."""
    if rows.get_column("user_id").null_count():
        rows = rows.filter(pl.col("user_id").is_not_null())
    if source == "coat":
        rows = rows.filter(pl.col("logging_policy").fill_null("") != COAT_RANDOM)
    return rows


def unit_counts(positives: pl.DataFrame, algorithm: int) -> pl.DataFrame:
    """item_id, count: the units per item of ``positives`` (history positive rows): rows
    (``ROWS``), distinct users (``PAIRS``). Sums over disjoint user sets."""
    if algorithm == PAIRS:
        positives = positives.unique(PAIR)
    return positives.group_by("item_id").agg(pl.len().cast(pl.Int64).alias("count"))


def check_algorithm(algorithm: int) -> None:
    if algorithm not in ALGORITHMS:
        raise DataError(f"unknown split algorithm {algorithm!r}; choose {ROWS} (rows) or {PAIRS} (pairs)")


#: Rows per batch when ``read_rows`` walks the data.
READ_BATCH = 1 << 16


def read_rows(dataset: Dataset, mask: np.ndarray) -> pl.DataFrame:
    """Every canonical column, and ``__row``, of the rows where ``mask`` ([N] bool, over the rows
    in ``Dataset.interactions`` order) is true. Walks the partition files in batches, so the
    memory it needs is what it keeps, not the data it reads."""
    kept, offset = [], 0
    for path in dataset.partition_paths():
        for batch in pq.ParquetFile(path).iter_batches(batch_size=READ_BATCH, columns=COLUMNS):
            take = np.flatnonzero(mask[offset : offset + batch.num_rows])
            if take.size:
                df = pl.from_arrow(batch.take(pa.array(take)))
                kept.append(df.with_columns(pl.Series("__row", take + offset, dtype=pl.get_index_type())))
            offset += batch.num_rows
    if not kept:
        return pl.DataFrame(schema={**polars_schema(INTERACTIONS), "__row": pl.get_index_type()})
    return pl.concat(kept)
