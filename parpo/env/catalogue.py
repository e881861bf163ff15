"""The item catalogue an agent searches: ids, category, attributes, price, popularity, recency.

Built from the canonical item table and a split (popularity and recency from the split's
*train* part only), and serialisable on its own (``write``/``read`` parquet) so that a policy
version can snapshot it for serving without the dataset. Search is vectorised numpy over
the whole catalogue and ranks by catalogue signals only; reward-model scores never enter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from parpo.env.schema import Constraints, Search

#: Columns of the parquet snapshot (``write``/``read``).
COLUMNS = ("item_id", "category", "attributes", "price", "popularity", "recency")
#: Per-candidate features (``Catalogue.features``), in column order.
FEATURES = (
    "log_popularity",  # log1p(train count) / log1p(max count), in [0, 1]
    "recency",  # rank of the last train interaction, in [0, 1] (1: newest)
    "log_price",  # log1p(price) / log1p(max price), 0 where unknown
    "has_price",
    "category_match",  # item category == request category (1 when the request names none)
    "attribute_match",  # share of the request's attributes the item has (1 when none asked)
    "satisfies",  # the item meets the whole request (category and constraints)
)


class Catalogue:
    """Items as aligned numpy columns; a row index is an item's position in ``item_ids``."""

    def __init__(self, frame: pl.DataFrame) -> None:
        frame = frame.select(COLUMNS)
        self.frame = frame
        self.item_ids: list[str] = frame["item_id"].to_list()
        self.row = {k: i for i, k in enumerate(self.item_ids)}
        cats = frame["category"]
        self.categories: list[str] = sorted(cats.drop_nulls().unique().to_list())
        self.category_code = {c: i for i, c in enumerate(self.categories)}
        self.cat = np.array([self.category_code.get(c, -1) for c in cats.to_list()], dtype=np.int32)
        self.price = frame["price"].cast(pl.Float64).fill_null(np.nan).to_numpy()
        self.popularity = frame["popularity"].cast(pl.Int64).to_numpy()
        self.recency = frame["recency"].cast(pl.Float64).to_numpy()
        attrs = frame["attributes"].fill_null([])
        self.attributes: list[str] = sorted(attrs.explode().drop_nulls().unique().to_list())
        self.attribute_code = {a: i for i, a in enumerate(self.attributes)}
        lengths = attrs.list.len().to_numpy().astype(np.int64)
        flat = attrs.explode().drop_nulls().to_list()
        # CSR of item -> attribute codes: matching counts are one bincount over the flat codes.
        self.attr_codes = np.array([self.attribute_code[a] for a in flat], dtype=np.int64)
        self.attr_rows = np.repeat(np.arange(len(self.item_ids), dtype=np.int64), lengths)
        pop_rank = np.log1p(self.popularity.astype(np.float64))
        self._log_pop = pop_rank / max(float(pop_rank.max(initial=0.0)), 1e-12)
        order = np.argsort(np.argsort(self.recency, kind="stable"), kind="stable")
        self._recency01 = order / max(len(order) - 1, 1)
        lp = np.log1p(np.nan_to_num(self.price, nan=0.0))
        log_price = lp / max(float(lp.max(initial=0.0)), 1e-12)
        # The request-independent feature columns, gathered per candidate list.
        self._static = np.stack(
            [self._log_pop, self._recency01, log_price, np.isfinite(self.price)], axis=1
        ).astype(np.float32)

    def __len__(self) -> int:
        return len(self.item_ids)

    # -- building and snapshots --------------------------------------------------------
    @classmethod
    def build(cls, items: pl.DataFrame, train: pl.DataFrame) -> Catalogue:
        """From the canonical item table and a split's train part (popularity, recency).

        Items that appear in the interactions but not in the item table are added without
        category, attributes or price. Recency is the last train timestamp (unix seconds), or
        the last train ``seq`` position where timestamps are missing (Amazon).
        """
        counts = train.group_by("item_id").agg(
            pl.len().cast(pl.Int64).alias("popularity"),
            pl.col("ts").max().dt.epoch("s").cast(pl.Float64).alias("__ts"),
        )
        if counts["__ts"].null_count() == counts.height:
            # No timestamps: the position of the item's last row in the (user, ts, seq) ordered part.
            last = (
                train.with_row_index("__pos").group_by("item_id").agg(pl.col("__pos").max().cast(pl.Float64))
            )
            counts = counts.join(last, on="item_id", how="left").with_columns(pl.col("__pos").alias("__ts"))
        ids = pl.concat([items.select("item_id"), train.select("item_id").unique()]).unique(
            maintain_order=True
        )
        frame = (
            ids.join(items, on="item_id", how="left")
            .join(counts.select("item_id", "popularity", "__ts"), on="item_id", how="left")
            .with_columns(
                pl.col("popularity").fill_null(0),
                pl.col("__ts").fill_null(float("-inf")).alias("recency"),
                pl.col("attributes").cast(pl.List(pl.String)).fill_null([]),
                pl.col("price").cast(pl.Float64),
                pl.col("category").cast(pl.String),
            )
            .sort("item_id")
        )
        return cls(frame)

    def write(self, path: str | Path) -> None:
        self.frame.write_parquet(path, compression="zstd")

    @classmethod
    def read(cls, path: str | Path) -> Catalogue:
        return cls(pl.read_parquet(path))

    # -- lookups -----------------------------------------------------------------------
    def rows(self, item_ids: Sequence[str]) -> np.ndarray:
        """Row of each id; -1 for an id not in the catalogue. [N] int64."""
        return np.array([self.row.get(i, -1) for i in item_ids], dtype=np.int64)

    def candidate_mask(self, item_ids: Sequence[str] | None) -> np.ndarray | None:
        """[n_items] bool: the catalogue rows of ``item_ids`` (ids not in the catalogue are
        ignored); None when there is no candidate list (every item is allowed)."""
        if item_ids is None:
            return None
        allowed = np.zeros(len(self), dtype=bool)
        rows = self.rows(item_ids)
        allowed[rows[rows >= 0]] = True
        return allowed

    def attribute_hits(self, attributes: Sequence[str]) -> np.ndarray:
        """How many of ``attributes`` each item has; [n_items] int64 (unknown ids never match)."""
        want = np.zeros(len(self.attributes) + 1, dtype=np.int64)
        codes = [self.attribute_code[a] for a in set(attributes) if a in self.attribute_code]
        want[codes] = 1
        return np.bincount(self.attr_rows, weights=want[self.attr_codes], minlength=len(self)).astype(
            np.int64
        )

    def mask(self, category: str | None, constraints: Constraints) -> np.ndarray:
        """Items of ``category`` (any when None) that satisfy ``constraints``; [n_items] bool.

        An unknown category matches nothing; an item without a price fails any price bound.
        """
        if category is None:
            m = np.ones(len(self), dtype=bool)
        else:
            m = self.cat == self.category_code.get(category, -2)
        if constraints.price_max is not None:
            m &= self.price <= constraints.price_max  # NaN compares False
        if constraints.price_min is not None:
            m &= self.price >= constraints.price_min
        if constraints.attributes:
            m &= self.attribute_hits(constraints.attributes) == len(set(constraints.attributes))
        return m

    # -- search ------------------------------------------------------------------------
    def search(self, action: Search, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
        """Rows of the top ``k`` items for ``action`` (best first), among ``allowed`` when given.

        Ranking keys, then popularity (descending), then row (ascending) break ties:
        popularity, recency (newest first), price_asc / price_desc (unknown prices last),
        attribute_match (overlap with ``action.attributes``, most first).
        """
        m = self.mask(action.category, action.constraints)
        if allowed is not None:
            m &= allowed
        rows = np.flatnonzero(m)
        if rows.size == 0:
            return rows
        pop = -self.popularity[rows]
        s = action.strategy
        if s == "popularity":
            keys = (rows, pop)
        elif s == "recency":
            keys = (rows, pop, -self.recency[rows])
        elif s in ("price_asc", "price_desc"):
            p = self.price[rows]
            p = np.where(np.isnan(p), np.inf, p if s == "price_asc" else -p)
            keys = (rows, pop, p)
        else:
            keys = (rows, pop, -self.attribute_hits(action.attributes)[rows])
        order = np.lexsort(keys)  # the last key is the primary one
        return rows[order[:k]]

    def request_view(self, category: str | None, constraints: Constraints) -> RequestView:
        """What the request-dependent features need, computed once per episode."""
        n_attr = len(set(constraints.attributes))
        return RequestView(
            category=-1 if category is None else self.category_code.get(category, -2),
            attribute_share=self.attribute_hits(constraints.attributes) / n_attr if n_attr else None,
            satisfies=self.mask(category, constraints),
        )

    def features(self, rows: np.ndarray, view: RequestView) -> np.ndarray:
        """Catalogue features of the candidates ``rows`` for a request; [N, len(FEATURES)] float32."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((rows.size, len(FEATURES)), dtype=np.float32)
        out[:, :4] = self._static[rows]
        out[:, 4] = 1.0 if view.category == -1 else self.cat[rows] == view.category
        out[:, 5] = 1.0 if view.attribute_share is None else view.attribute_share[rows]
        out[:, 6] = view.satisfies[rows]
        return out


@dataclass(frozen=True)
class RequestView:
    """``category``: code (-1: none asked, -2: unknown); ``attribute_share``: [n_items] share of the
    request's attributes each item has (None: none asked); ``satisfies``: [n_items] bool."""

    category: int
    attribute_share: np.ndarray | None
    satisfies: np.ndarray
