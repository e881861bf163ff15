"""Side features of the hybrid embeddings: sparse per-row feature matrices for users and items.

A hybrid vector is the id row plus the feature rows (``CausalEmbeddings``):
``v_i = e_i + sum_f X[i, f] w_f`` on every branch. Items: their category (one-hot), attributes
(multi-hot, each ``1 / sqrt(#attributes)`` so an item with many tags is not a longer vector) and
price bucket (quantiles of the price over priced items, one-hot). Users: the users table's
categorical features (one-hot ``key=value``, values seen at least twice) and standardised
numeric ones. Vocabularies are stage 1's (``reward_models.profile.spec``), so both stages read
features the same way. A dataset without a side's features gets no matrix for it (ids only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from data_pipelines.dataset import Dataset
from reward_models.data import RewardData


@dataclass
class SideFeatures:
    """``matrix``: sparse COO [n_rows, F] float32, coalesced (rows in id-map order); ``names``: [F] feature names."""

    matrix: Tensor
    names: list[str]

    @property
    def n_features(self) -> int:
        return len(self.names)


def _sparse(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n: int, f: int) -> Tensor:
    idx = torch.from_numpy(np.stack([rows, cols]).astype(np.int64))
    # indices are in range by construction: skip torch's invariant check explicitly
    x = torch.sparse_coo_tensor(
        idx, torch.from_numpy(vals.astype(np.float32)), (n, f), check_invariants=False
    )
    return x.coalesce()


def price_buckets(log_price: Tensor, priced: Tensor, n_buckets: int) -> Tensor:
    """Quantile bucket [n] int64 in [0, n_buckets) of each priced item (-1: no price).

    log_price, priced: [n]; edges are the inner quantiles over priced items, so buckets hold
    about equal numbers of items."""
    out = torch.full(log_price.shape, -1, dtype=torch.int64)
    if not bool(priced.any()) or n_buckets < 2:
        out[priced] = 0
        return out
    q = torch.linspace(0, 1, n_buckets + 1, dtype=torch.float64)[1:-1]
    edges = torch.quantile(log_price[priced].double(), q)
    out[priced] = torch.searchsorted(edges, log_price[priced].double().contiguous(), right=True)
    return out


def item_features(ds: Dataset, data: RewardData, n_buckets: int) -> SideFeatures | None:
    """Category, attributes and price bucket of ``data``'s items; None when the catalogue has none."""
    from reward_models.profile.spec import build_spec, item_side

    spec = build_spec(ds.items(), None, 0.0)
    index = {k: i for i, k in enumerate(data.item_ids())}
    side = item_side(spec, ds.items(), index, data.n_items)
    n_cat, n_attr = len(spec.categories), len(spec.attributes)
    rows, cols, vals = [], [], []
    has = (side.category >= 0).numpy()
    rows.append(np.flatnonzero(has))
    cols.append(side.category.numpy()[has])
    vals.append(np.ones(int(has.sum())))
    r, c = np.nonzero(side.attributes.numpy())
    n_tags = np.maximum(side.attributes.numpy().sum(1), 1.0)
    rows.append(r)
    cols.append(n_cat + c)
    vals.append(1.0 / np.sqrt(n_tags[r]))
    names = [f"category={c}" for c in spec.categories] + [f"attribute={a}" for a in spec.attributes]
    if spec.has_price:
        bucket = price_buckets(side.log_price, side.priced, n_buckets).numpy()
        p = bucket >= 0
        rows.append(np.flatnonzero(p))
        cols.append(n_cat + n_attr + bucket[p])
        vals.append(np.ones(int(p.sum())))
        names += [f"price_bucket={k}" for k in range(n_buckets)]
    if not names:
        return None
    return SideFeatures(
        _sparse(np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), data.n_items, len(names)),
        names,
    )


def user_features(ds: Dataset, data: RewardData) -> SideFeatures | None:
    """The users table's features of ``data``'s users; None when there is no users table or feature."""
    from reward_models.profile.fit import features_of
    from reward_models.profile.spec import build_spec
    from reward_models.profile.views import feature_matrix

    users = ds.table("users")
    if users is None or users.height == 0:
        return None
    spec = build_spec(ds.items(), users, 0.0)
    names = [*spec.feature_values, *spec.numeric_features]
    if not names:
        return None
    dense = feature_matrix(spec, features_of(users, data.user_ids())).numpy()
    r, c = np.nonzero(dense)
    return SideFeatures(_sparse(r, c, dense[r, c], data.n_users, len(names)), names)
