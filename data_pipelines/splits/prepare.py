"""The frame every split protocol starts from: rows in order, positives, cold users.

One ``Prepared`` per (dataset, seed, rule, algorithm) is shared by all protocols,
so ``write_all`` reads the data and hashes the users once.

The split algorithm says what ``temporal``, ``intervened`` and ``cold_users``'
valid assign to parts: ``ROWS`` (1) assigns each positive row on its own, so the
click, cart and buy of one (user, item) pair can land in train and test at once
(splits written before algorithms were numbered); ``PAIRS`` (2) assigns each
pair with all its positive rows, a pair's time being its first positive.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import polars as pl

from data_pipelines.dataset import Dataset
from data_pipelines.schema import INTERACTIONS
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

ROWS, PAIRS = 1, 2
#: The split algorithms (see the module docstring); new splits use ``ALGORITHM``.
ALGORITHMS = (ROWS, PAIRS)
ALGORITHM = PAIRS
PAIR = ["user_id", "item_id"]


@dataclass
class Prepared:
    """All interactions of one dataset, read once, plus what the protocols share.

    ``rows``: every canonical row [N] with ``__row`` (input order, int) and
    ``__pos`` (bool: a positive under ``rule``). ``algorithm``: ``ROWS`` or ``PAIRS``.
    """

    source: str
    fingerprint: str
    seed: int
    rule: PositivesRule
    rows: pl.DataFrame
    algorithm: int = ALGORITHM

    @classmethod
    def of(
        cls, dataset: Dataset, seed: int = 0, rule: PositivesRule | None = None, algorithm: int = ALGORITHM
    ) -> Prepared:
        check_algorithm(algorithm)
        rule = rule or PositivesRule()
        rows = (
            dataset.interactions()
            .with_row_index("__row")
            .with_columns(rule.is_positive().fill_null(False).alias("__pos"))
            .collect()
        )
        return cls(dataset.source, dataset.fingerprint, seed, rule, rows, algorithm)

    @cached_property
    def history(self) -> pl.DataFrame:
        """Rows with a user (anonymous rows dropped; Coat: self-selected rows only), in ORDER.

        Adds ``__uh`` (uint64 user hash under the seed), ``__rank`` (0-based event
        order within the user), ``__n`` (the user's events), ``__cold`` (bool).
        """
        df = self.rows.filter(pl.col("user_id").is_not_null())
        if self.source == "coat":
            df = df.filter(pl.col("logging_policy").fill_null("") != COAT_RANDOM)
        df = df.sort(ORDER, nulls_last=True)
        uh = id_hash64(df.get_column("user_id"), self.seed)
        cold = uniform(uh.to_numpy(), "cold_users") < COLD_USER_FRACTION
        return df.with_columns(
            uh.alias("__uh"),
            pl.Series("__cold", cold),
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
        pos = self.history.filter("__pos")
        if self.algorithm == PAIRS:
            pos = pos.unique(PAIR)
        return pos.group_by("item_id").agg(pl.len().cast(pl.Int64).alias("count"))

    def row_uniform(self, df: pl.DataFrame, purpose: str) -> pl.Series:
        """Float64 [len(df)] in (0, 1) per (user, seq) of ``df`` (history rows): stable under appends.

        A pair's number is its first positive's, so a dataset with one positive per pair
        gets the same draws, hence the same split, under ``ROWS`` and ``PAIRS``."""
        u = uniform(df.get_column("__uh").to_numpy(), purpose, df.get_column("seq").to_numpy())
        return pl.Series(purpose, u)

    def user_uniform(self, df: pl.DataFrame, purpose: str) -> pl.Series:
        """Float64 [len(df)] in (0, 1), one number per user of ``df`` (history rows)."""
        return pl.Series(purpose, uniform(df.get_column("__uh").to_numpy(), purpose))


def check_algorithm(algorithm: int) -> None:
    if algorithm not in ALGORITHMS:
        raise DataError(f"unknown split algorithm {algorithm!r}; choose {ROWS} (rows) or {PAIRS} (pairs)")
