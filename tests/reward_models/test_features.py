"""Hybrid embeddings: the side feature matrices and the composed tables."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from data_pipelines.dataset import Dataset
from reward_models.data import RewardData
from reward_models.features import item_features, price_buckets, user_features
from reward_models.model import CausalEmbeddings
from reward_models.model.embeddings import padded_rows


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


def test_padded_rows_hold_each_rows_entries_and_zero_padding():
    x = torch.sparse_coo_tensor(
        torch.tensor([[0, 0, 2], [0, 1, 1]]), torch.tensor([1.0, 0.5, 2.0]), (4, 3), check_invariants=True
    )
    cols, vals = padded_rows(x)
    assert cols.tolist() == [[0, 1], [0, 0], [1, 0], [0, 0]]
    assert vals.tolist() == [[1.0, 0.5], [0.0, 0.0], [2.0, 0.0], [0.0, 0.0]]


def _hybrid(seed: int, sparse_rows: bool = False) -> CausalEmbeddings:
    g = torch.Generator().manual_seed(seed)
    n_u, n_i = 30, 40
    xu = (torch.rand(n_u, 5, generator=g) < 0.4).float() * torch.rand(n_u, 5, generator=g)
    xi = (torch.rand(n_i, 7, generator=g) < 0.3).float()
    m = CausalEmbeddings(
        n_u, n_i, 4, generator=g, user_features=xu.to_sparse(), item_features=xi.to_sparse(),
        item_buckets=torch.randint(0, 6, (n_i,), generator=g), n_buckets=6, fixed_levels=True,
        sparse_rows=sparse_rows,
    )  # fmt: skip
    with torch.no_grad():  # feature rows away from their zero start, so they matter
        m.user_feat.normal_(0, 0.3, generator=g)
        m.item_feat.normal_(0, 0.3, generator=g)
    return m


@pytest.mark.parametrize("sparse_rows", [False, True])
def test_batch_tables_give_the_whole_tables_scores_and_gradients(sparse_rows):
    """The rows a batch reads: the whole tables' values, scores and gradients (sparse id-table
    gradients holding exactly the rows read, with ``sparse_rows``)."""
    g = torch.Generator().manual_seed(3)
    u, i, j = (torch.randint(0, n, (64,), generator=g) for n in (30, 40, 40))
    whole, part = _hybrid(0), _hybrid(0, sparse_rows)
    a = whole(u, i, j, sq_norm=True)
    t, u_at, i_at = part.batch_tables(u, torch.cat([i, j]))
    assert t.user_all.shape[0] == u.unique().numel() < 30  # only the rows the batch reads
    torch.testing.assert_close(t.user_all, whole.tables().user_all[u.unique()])
    b = part(u_at, i_at[:64], i_at[64:], tables=t, sq_norm=True)
    for k in a.diff:
        torch.testing.assert_close(a.diff[k], b.diff[k])
    torch.testing.assert_close(a.sq_norm, b.sq_norm)
    (a.click.square().sum() + a.sq_norm).backward()
    (b.click.square().sum() + b.sq_norm).backward()
    for (name, p), q in zip(whole.named_parameters(), part.parameters(), strict=True):
        sparse = sparse_rows and name in ("user", "item")
        assert q.grad.is_sparse == sparse, name
        torch.testing.assert_close(p.grad, q.grad.to_dense() if sparse else q.grad, msg=name)
        if sparse:
            read = (u if name == "user" else torch.cat([i, j])).unique()
            assert torch.equal(q.grad.coalesce().indices()[0], read)
