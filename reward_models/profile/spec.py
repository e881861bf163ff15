"""What the profile views are made of: vocabularies and item side arrays, read once from a dataset.

A ``ViewSpec`` is JSON (it travels in the registry version's ``metadata.json``), so the
readout rebuilds the same views for a cold user's profile without the dataset.
``ItemSide`` holds every id-map item's category, attributes and log price as tensors
(they travel in the weights), used by the content/price views and the item map.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import polars as pl
import torch

from data_pipelines.schema import DEFAULT_POSITIVE_EVENTS
from parpo_core.config import StrictModel

MAX_CATEGORIES = 100
MAX_ATTRIBUTES = 200
MAX_FEATURE_VALUES = 200
MIN_FEATURE_COUNT = 2  # a key=value seen once (a zip code) cannot generalise to another user


class ViewSpec(StrictModel):
    """Vocabularies and scales of the views (see ``reward_models.profile.views``)."""

    events: list[str] = list(DEFAULT_POSITIVE_EVENTS)
    categories: list[str] = []
    attributes: list[str] = []
    feature_values: list[str] = []  # categorical user features as "key=value"
    numeric_features: list[str] = []  # keys whose every value parses as a number
    numeric_mean: list[float] = []
    numeric_std: list[float] = []
    has_price: bool = False
    ref_time: float = 0.0  # seconds: "now" for recency (the last train event)
    # standardisation of the activity view, set from warm users by ``fit_scales``
    activity_mean: list[float] = [0.0] * 5
    activity_std: list[float] = [1.0] * 5

    @property
    def names(self) -> list[str]:
        """The views this dataset has, in a fixed order."""
        out = ["events", "activity"]
        if self.categories or self.attributes:
            out.append("content")
        if self.has_price:
            out.append("price")
        if self.feature_values or self.numeric_features:
            out.append("features")
        return out

    def dims(self) -> dict[str, int]:
        d = {
            "events": len(self.events),
            "activity": 5,
            "content": len(self.categories) + len(self.attributes),
            "price": 2,
            "features": len(self.feature_values) + len(self.numeric_features),
        }
        return {k: d[k] for k in self.names}


@dataclass
class ItemSide:
    """Per id-map item: ``category`` [n] int64 (-1: none), ``attributes`` [n, A] float32 multi-hot,
    ``log_price`` [n] float32 standardised (0 where unknown), ``priced`` [n] bool."""

    category: torch.Tensor
    attributes: torch.Tensor
    log_price: torch.Tensor
    priced: torch.Tensor

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        return {
            f"{prefix}category": self.category,
            f"{prefix}attributes": self.attributes,
            f"{prefix}log_price": self.log_price,
            f"{prefix}priced": self.priced.to(torch.uint8),
        }

    @classmethod
    def from_tensors(cls, t: dict[str, torch.Tensor], prefix: str) -> ItemSide:
        return cls(
            t[f"{prefix}category"].long(),
            t[f"{prefix}attributes"].float(),
            t[f"{prefix}log_price"].float(),
            t[f"{prefix}priced"].bool(),
        )

    def features(self, n_categories: int) -> torch.Tensor:
        """Item-map input [n, C + A + 2]: category one-hot, attributes, log price and its flag."""
        n = self.category.shape[0]
        cat = torch.zeros(n, n_categories)
        has = self.category >= 0
        cat[has, self.category[has]] = 1.0
        return torch.cat([cat, self.attributes, self.log_price[:, None], self.priced.float()[:, None]], 1)


def _top(counter: Counter, limit: int, min_count: int = 1) -> list[str]:
    kept = [(k, c) for k, c in counter.items() if c >= min_count]
    return [k for k, _ in sorted(kept, key=lambda kc: (-kc[1], kc[0]))[:limit]]


def _is_number(s: str) -> bool:
    try:
        return math.isfinite(float(s))
    except ValueError:
        return False


def build_spec(items: pl.DataFrame, users: pl.DataFrame | None, ref_time: float) -> ViewSpec:
    """Vocabularies from the canonical items and users tables (``users`` may be None)."""
    cats = Counter(c for c in items["category"].to_list() if c is not None)
    attrs = Counter(a for row in items["attributes"].to_list() for a in (row or []))
    prices = items["price"].drop_nulls() if "price" in items.columns else pl.Series([], dtype=pl.Float64)
    by_key: dict[str, list[str]] = {}
    for row in users["features"].to_list() if users is not None and users.height else []:
        for kv in row or []:
            by_key.setdefault(kv["key"], []).append(kv["value"])
    numeric = sorted(k for k, vs in by_key.items() if vs and all(_is_number(v) for v in vs))
    values = Counter(f"{k}={v}" for k, vs in by_key.items() if k not in numeric for v in vs)
    stats = [np.asarray([float(v) for v in by_key[k]]) for k in numeric]
    return ViewSpec(
        categories=_top(cats, MAX_CATEGORIES),
        attributes=_top(attrs, MAX_ATTRIBUTES),
        feature_values=_top(values, MAX_FEATURE_VALUES, MIN_FEATURE_COUNT),
        numeric_features=numeric,
        numeric_mean=[float(s.mean()) for s in stats],
        numeric_std=[float(s.std()) or 1.0 for s in stats],
        has_price=bool((prices > 0).any()),
        ref_time=ref_time,
    )


def item_side(spec: ViewSpec, items: pl.DataFrame, item_index: dict[str, int], n_items: int) -> ItemSide:
    """Side arrays in id-map order; items missing from ``items`` have no category or attributes."""
    cat_ix = {c: k for k, c in enumerate(spec.categories)}
    attr_ix = {a: k for k, a in enumerate(spec.attributes)}
    category = torch.full((n_items,), -1, dtype=torch.int64)
    attributes = torch.zeros(n_items, len(spec.attributes))
    price = torch.full((n_items,), float("nan"))
    has_price = "price" in items.columns
    cols = [items["item_id"], items["category"], items["attributes"]]
    prices = items["price"].to_list() if has_price else [None] * items.height
    for iid, c, attrs, p in zip(*(c.to_list() for c in cols), prices, strict=True):
        row = item_index.get(iid)
        if row is None:
            continue
        category[row] = cat_ix.get(c, -1) if c is not None else -1
        for a in attrs or []:
            if a in attr_ix:
                attributes[row, attr_ix[a]] = 1.0
        if p is not None and p > 0:
            price[row] = math.log(p)
    priced = ~torch.isnan(price)
    if bool(priced.any()):
        mu, sd = price[priced].mean(), price[priced].std(unbiased=False).clamp(min=1e-6)
        price = torch.where(priced, (price - mu) / sd, torch.zeros(()))
    else:
        price = torch.zeros(n_items)
    return ItemSide(category, attributes, price.float(), priced)
