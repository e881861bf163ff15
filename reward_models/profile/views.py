"""The views of a user's profile: dense per-user vectors built from a log of events and features.

Every view is [U, d_v] float32 with a presence flag (mask [U, V]); a view a user has
no evidence for (no events, no priced item, no features) is absent, not zero:

| view | d_v | value |
|---|---|---|
| ``events`` | E | share of each positive event type (view, click, cart, fav, buy, rate) |
| ``activity`` | 5 | log1p of events, distinct items, span (days), recency (days before ``ref_time``), mean log1p train popularity of the items; standardised |
| ``content`` | C + A | share of the events on each category, mean attribute multi-hot |
| ``price`` | 2 | mean and std of the items' standardised log price |
| ``features`` | F + F_num | explicit user features: "key=value" one-hot, numeric ones standardised |

Only positive event types count (impressions are dropped), so a warm user's train
positives and a cold user's ``cold_profile`` events give comparable views.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import torch
from torch import Tensor

from reward_models.profile.spec import ItemSide, ViewSpec

DAY = 86_400.0


@dataclass
class ProfileLog:
    """Events of ``n_users`` users in index form, arrays [N]: ``row`` user row 0..U-1 (int64),
    ``item`` id-map index (-1: unknown item), ``event`` index into ``spec.events`` (int64, -1:
    not given), ``ts`` seconds (float64, nan: unknown)."""

    n_users: int
    row: Tensor
    item: Tensor
    event: Tensor
    ts: Tensor

    @classmethod
    def from_frame(
        cls, frame: pl.DataFrame, spec: ViewSpec, users: Sequence[str], item_index: Mapping[str, int]
    ) -> ProfileLog:
        """Canonical interaction rows of ``users`` (others dropped); non-positive event types dropped."""
        pos = {u: k for k, u in enumerate(users)}
        ev = {e: k for k, e in enumerate(spec.events)}
        f = frame.filter(pl.col("event").is_in(spec.events) & pl.col("user_id").is_in(list(pos)))
        ts = f["ts"].dt.epoch("us").cast(pl.Float64) / 1e6 if f.height else pl.Series([], dtype=pl.Float64)
        return cls(
            len(users),
            torch.tensor([pos[u] for u in f["user_id"].to_list()], dtype=torch.int64),
            torch.tensor([item_index.get(i, -1) for i in f["item_id"].to_list()], dtype=torch.int64),
            torch.tensor([ev[e] for e in f["event"].to_list()], dtype=torch.int64),
            torch.from_numpy(ts.fill_null(float("nan")).to_numpy().astype(np.float64)),
        )


def feature_matrix(spec: ViewSpec, features: Sequence[Mapping[str, str] | None]) -> Tensor:
    """[U, F + F_num]: one-hot "key=value" then standardised numeric features (0 when missing)."""
    vix = {v: k for k, v in enumerate(spec.feature_values)}
    nix = {v: k for k, v in enumerate(spec.numeric_features)}
    f = len(spec.feature_values)
    out = torch.zeros(len(features), f + len(nix))
    for r, feats in enumerate(features):
        for key, value in (feats or {}).items():
            if key in nix:
                k = nix[key]
                try:
                    out[r, f + k] = (float(value) - spec.numeric_mean[k]) / spec.numeric_std[k]
                except ValueError:
                    continue  # a non-numeric value of a numeric feature: treated as missing
            elif f"{key}={value}" in vix:
                out[r, vix[f"{key}={value}"]] = 1.0
    return out


def _per_user(n: int, row: Tensor, x: Tensor) -> Tensor:
    """Sum of rows ``x`` [N, d] per user -> [n, d]."""
    return torch.zeros(n, x.shape[1], dtype=x.dtype).index_add_(0, row, x)


#: Events gathered at once by ``_per_user_of``: bounds its [chunk, d] rows (a 95M-event log's
#: content rows were 10 GB at once).
EVENT_CHUNK = 1 << 20


def _per_user_of(n: int, row: Tensor, table: Tensor, index: Tensor) -> Tensor:
    """Sum of ``table[index]`` rows [N, d] per user -> [n, d], gathered a chunk of events at a time."""
    out = torch.zeros(n, table.shape[1], dtype=table.dtype)
    for s in range(0, row.numel(), EVENT_CHUNK):
        out.index_add_(0, row[s : s + EVENT_CHUNK], table.index_select(0, index[s : s + EVENT_CHUNK]))
    return out


def build_views(
    spec: ViewSpec,
    log: ProfileLog,
    side: ItemSide,
    popularity: Tensor,
    features: Tensor | None,
) -> tuple[dict[str, Tensor], Tensor]:
    """Views of ``log``'s users: name -> [U, d_v] float32 and the mask [U, V] bool (``spec.names`` order).

    ``popularity``: [n_items] train counts; ``features``: [U, F] from ``feature_matrix`` or None."""
    n, row = log.n_users, log.row
    typed = log.event >= 0
    n_types = len(spec.events)  # (user, event type) counts, without an [N, types] one-hot
    counts = (
        torch.bincount(row[typed] * n_types + log.event[typed], minlength=n * n_types)
        .view(n, n_types)
        .double()
    )
    n_typed = counts.sum(1)
    n_ev = torch.bincount(row, minlength=n).double()
    present = {"events": n_typed > 0, "activity": n_ev > 0}
    views = {"events": (counts / n_typed.clamp(min=1)[:, None]).float()}

    known = log.item >= 0
    kr, ki = row[known], log.item[known]
    n_known = torch.zeros(n, dtype=torch.float64).index_add_(0, kr, torch.ones_like(kr, dtype=torch.float64))
    # one int64 key per (row, item) pair: torch.unique(dim=1) over the stacked pairs took ~300 bytes
    # and ~6 us per event (3.1 GB and 62 s for 10M events), the 1-D keys ~40 bytes and 0.1 us
    base = int(log.item.max()) + 2 if row.numel() else 1
    distinct = torch.unique(row * base + (log.item + 1)) // base
    n_distinct = torch.bincount(distinct, minlength=n).double()
    ts = torch.nan_to_num(log.ts.double(), nan=spec.ref_time)
    hi = torch.full((n,), -np.inf, dtype=torch.float64).scatter_reduce(0, row, ts, "amax")
    lo = torch.full((n,), np.inf, dtype=torch.float64).scatter_reduce(0, row, ts, "amin")
    has = n_ev > 0
    span = torch.where(has, (hi - lo) / DAY, 0.0).clamp(min=0)
    recency = torch.where(has, (spec.ref_time - hi) / DAY, 0.0).clamp(min=0)
    pop = _per_user(n, kr, torch.log1p(popularity[ki].double())[:, None])[:, 0] / n_known.clamp(min=1)
    act = torch.stack([n_ev, n_distinct, span, recency], 1).log1p()
    act = torch.cat([act, pop[:, None]], 1).float()
    views["activity"] = (act - torch.tensor(spec.activity_mean)) / torch.tensor(spec.activity_std)

    if "content" in spec.names:
        c = len(spec.categories)
        cat = side.category  # each item's content row (category one-hot, attributes), summed per user
        onehot = torch.zeros(cat.numel(), c)
        onehot[cat >= 0, cat[cat >= 0]] = 1.0
        x = torch.cat([onehot, side.attributes], 1).double()
        views["content"] = (_per_user_of(n, kr, x, ki) / n_known.clamp(min=1)[:, None]).float()
        present["content"] = n_known > 0
    if "price" in spec.names:
        pr = side.priced[ki]
        r, p = kr[pr], side.log_price[ki][pr].double()
        cnt = torch.bincount(r, minlength=n).double()
        mean = _per_user(n, r, p[:, None])[:, 0] / cnt.clamp(min=1)
        sq = _per_user(n, r, (p * p)[:, None])[:, 0] / cnt.clamp(min=1)
        views["price"] = torch.stack([mean, (sq - mean**2).clamp(min=0).sqrt()], 1).float()
        present["price"] = cnt > 0
    if "features" in spec.names:
        feats = features if features is not None else torch.zeros(n, spec.dims()["features"])
        views["features"] = feats.float()
        present["features"] = feats.abs().sum(1) > 0
    mask = torch.stack([present[k] for k in spec.names], 1)
    return {k: views[k] for k in spec.names}, mask


def fit_scales(spec: ViewSpec, activity: Tensor, present: Tensor) -> ViewSpec:
    """``spec`` with the activity view's mean/std set from the raw activity rows [U, 5] of present users."""
    a = activity[present].double() if bool(present.any()) else activity.double()
    mean = a.mean(0) if a.shape[0] else torch.zeros(5, dtype=torch.float64)
    std = a.std(0, unbiased=False).clamp(min=1e-6) if a.shape[0] > 1 else torch.ones(5, dtype=torch.float64)
    return spec.model_copy(update={"activity_mean": mean.tolist(), "activity_std": std.tolist()})
