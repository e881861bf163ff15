"""Hybrid embeddings: the side feature matrices and the composed tables."""

from __future__ import annotations

import numpy as np
import torch

from data_pipelines.dataset import Dataset
from reward_models.data import RewardData
from reward_models.features import item_features, price_buckets, user_features
from reward_models.model import CausalEmbeddings


def test_price_buckets_by_hand():
    lp = torch.tensor([0.0, 1.0, 2.0, 3.0, 9.0, 5.0])
    priced = torch.tensor([True, True, True, True, False, True])
    # priced values 0, 1, 2, 3, 5: quartile edges 1, 2, 3 -> buckets 0, 1, 2, 3, 3; unpriced -1
    assert price_buckets(lp, priced, 4).tolist() == [0, 1, 2, 3, -1, 3]
    assert price_buckets(lp, priced, 1).tolist() == [0, 0, 0, 0, -1, 0]


def test_synthetic_features_cover_every_side(tiny_synth):
    ds = Dataset(tiny_synth)
    data = RewardData.load(ds, "intervened")
    items = item_features(ds, data, 4)
    assert items is not None and items.matrix.shape == (data.n_items, items.n_features)
    kinds = {n.split("=")[0] for n in items.names}
    assert kinds == {"category", "attribute", "price_bucket"}
    dense = items.matrix.to_dense()
    cat = dense[:, [k for k, n in enumerate(items.names) if n.startswith("category=")]]
    assert torch.all(cat.sum(1) == 1)  # every synthetic item has one category
    attr = dense[:, [k for k, n in enumerate(items.names) if n.startswith("attribute=")]]
    tags = (attr > 0).sum(1)
    has = tags > 0
    # an item's attribute rows are scaled 1/sqrt(#attributes): unit length together
    torch.testing.assert_close(attr[has].pow(2).sum(1), torch.ones(int(has.sum())))
    users = user_features(ds, data)
    assert users is not None and users.matrix.shape[0] == data.n_users
    assert {n.split("=")[0] for n in users.names} >= {"region", "device"}


def test_composed_tables_are_id_rows_plus_feature_rows():
    x = torch.sparse_coo_tensor(
        torch.tensor([[0, 0, 2], [0, 1, 1]]), torch.tensor([1.0, 0.5, 2.0]), (3, 2), check_invariants=True
    )
    m = CausalEmbeddings(2, 3, 2, item_features=x.coalesce(), generator=torch.Generator().manual_seed(0))
    assert torch.equal(m.tables().item_all, m.item)  # feature rows start at zero: the id-only model
    with torch.no_grad():
        m.item_feat.copy_(torch.arange(8.0).view(2, 4))
    want = m.item.detach() + torch.tensor([[2.0, 3.5, 5.0, 6.5], [0, 0, 0, 0], [8.0, 10.0, 12.0, 14.0]])
    torch.testing.assert_close(m.tables().item_all, want)
    assert torch.equal(m.tables().user_all, m.user)  # no user features: ids only
    s = m(torch.tensor([0, 1]), torch.tensor([0, 2]), torch.tensor([1, 1]))
    s.click.sum().backward()
    # item 1 has no feature: only items 0 and 2 reach the feature rows
    assert m.item_feat.grad is not None and torch.isfinite(m.item_feat.grad).all()
    assert m.item_feat.grad.abs().sum() > 0
    np.testing.assert_array_equal(sorted(k for k, _ in m.named_parameters()), ["item", "item_feat", "user"])


def test_a_dataset_without_features_trains_on_ids(tmp_path):
    from data_pipelines.splits import PositivesRule
    from tests.data_pipelines.splits.helpers import coat_rows, make_dataset

    ds = make_dataset(
        tmp_path / "c", coat_rows(), source="coat"
    )  # no categories, attributes, prices, features
    data = RewardData.load(ds, "native", 0, PositivesRule(min_value=4))
    assert item_features(ds, data, 8) is None and user_features(ds, data) is None
