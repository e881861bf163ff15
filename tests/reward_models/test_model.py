"""Causal embeddings: LightGCN propagation against a dense reference, scores, fused score gradients, export."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reward_models.model import CausalEmbeddings, normalized_adjacency, popularity_buckets, propagate
from reward_models.model.embeddings import CHUNK, _PairDifference


def dense_reference(user, item, n_users, n_items, emb, layers):
    n = n_users + n_items
    a = np.zeros((n, n))
    for u, i in zip(user, item, strict=True):
        a[u, n_users + i] = a[n_users + i, u] = 1.0  # duplicates count once
    deg = a.sum(1)
    d = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1)), 0.0)
    norm = d[:, None] * a * d[None, :]
    out, e = emb.copy(), emb.copy()
    for _ in range(layers):
        e = norm @ e
        out += e
    return out / (layers + 1)


def test_lightgcn_propagation_matches_dense():
    rng = np.random.default_rng(0)
    n_users, n_items = 7, 9
    user = rng.integers(0, n_users - 1, 30)  # the last user has no edge
    item = rng.integers(0, n_items - 1, 30)  # neither has the last item
    user = np.concatenate([user, user[:3]])  # duplicated pairs
    item = np.concatenate([item, item[:3]])
    emb = rng.normal(size=(n_users + n_items, 5))
    adj = normalized_adjacency(user, item, n_users, n_items)
    for layers in (0, 1, 3):
        got = propagate(adj, torch.tensor(emb, dtype=torch.float32), layers).numpy()
        np.testing.assert_allclose(got, dense_reference(user, item, n_users, n_items, emb, layers), atol=1e-5)
    # symmetric and normalised: the largest eigenvalue of D^-1/2 A D^-1/2 is 1
    dense = adj.to_dense().numpy()
    np.testing.assert_allclose(dense, dense.T, atol=1e-7)
    assert np.max(np.abs(np.linalg.eigvalsh(dense))) <= 1.0 + 1e-5


def test_lightgcn_model_tables_and_gradients():
    user, item = np.array([0, 1, 1, 2]), np.array([0, 0, 2, 1])
    adj = normalized_adjacency(user, item, 3, 3)
    m = CausalEmbeddings(
        3, 3, 4, backbone="lightgcn", n_layers=2, adj=adj, generator=torch.Generator().manual_seed(0)
    )
    t = m.tables()
    for k, b in enumerate(("interest", "conformity")):
        e0 = torch.cat([m.rows("user"), m.rows("item")])[:, k * 4 : (k + 1) * 4].detach().numpy()
        ref = dense_reference(user, item, 3, 3, e0, 2)
        np.testing.assert_allclose(torch.cat([t.user[b], t.item[b]]).detach().numpy(), ref, atol=1e-5)
    s = m(torch.tensor([0, 1]), torch.tensor([0, 2]), torch.tensor([1, 1]))
    s.click.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


def test_click_is_interest_plus_conformity_and_export():
    m = CausalEmbeddings(4, 5, 3, generator=torch.Generator().manual_seed(1))
    u, i, j = torch.tensor([0, 3]), torch.tensor([1, 4]), torch.tensor([2, 0])
    s = m(u, i, j)
    exp = m.export()
    assert set(exp) == {"user_interest", "item_interest", "user_conformity", "item_conformity"}

    def branch(b: str, items: torch.Tensor) -> torch.Tensor:
        return (exp[f"user_{b}"][u] * exp[f"item_{b}"][items]).sum(-1)

    for b in ("interest", "conformity"):
        torch.testing.assert_close(s.diff[b].detach(), branch(b, i) - branch(b, j))
    want = branch("interest", i) + branch("conformity", i) - branch("interest", j) - branch("conformity", j)
    torch.testing.assert_close(s.click.detach(), want)
    mf = CausalEmbeddings(4, 5, 3, disentangle=False)
    assert set(mf.export()) == {"user_interest", "item_interest"} and not mf.disentangled


@pytest.mark.parametrize("n", [7, CHUNK + 3])  # one chunk, and a chunk boundary
def test_pair_difference_gradients_match_plain_autograd(n):
    """The fused, chunked score difference equals the plain gather-multiply-sum graph, values and
    table gradients (repeated users and items in the batch accumulate)."""
    g = torch.Generator().manual_seed(0)
    users = torch.randn(6, 8, dtype=torch.float64, generator=g, requires_grad=True)
    items = torch.randn(9, 8, dtype=torch.float64, generator=g, requires_grad=True)
    u, i, j = (torch.randint(0, k, (n,), generator=g) for k in (6, 9, 9))
    w = torch.randn(n, 2, dtype=torch.float64, generator=g)
    got = _PairDifference.apply(users, items, u, i, j, 2)
    (got * w).sum().backward()
    g_users, g_items = users.grad.clone(), items.grad.clone()
    users.grad = items.grad = None
    want = (users[u] * (items[i] - items[j])).view(n, 2, 4).sum(-1)
    (want * w).sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(g_users, users.grad)
    torch.testing.assert_close(g_items, items.grad)
    if n < 20:
        assert torch.autograd.gradcheck(lambda a, b: _PairDifference.apply(a, b, u, i, j, 2), (users, items))


def test_squared_norms_of_the_rows():
    m = CausalEmbeddings(4, 5, 3, generator=torch.Generator().manual_seed(2))
    u, i, j = torch.tensor([0, 0]), torch.tensor([1, 4]), torch.tensor([2, 2])
    s = m(u, i, j, sq_norm=True)
    want = sum(float((x * x).sum()) for x in (m.user[u].detach(), m.item[i].detach(), m.item[j].detach()))
    assert s.sq_norm is not None and s.sq_norm.item() == pytest.approx(want)
    assert m(u, i, j).sq_norm is None


def test_popularity_buckets_are_log2_of_one_plus_popularity_capped():
    b = popularity_buckets(np.array([0, 1, 2, 3, 7, 8, 1000, 10**9]), 12)
    assert b.tolist() == [0, 1, 1, 2, 3, 3, 9, 11]


def test_popularity_conformity_items_of_one_bucket_share_their_conformity_vector():
    buckets = torch.tensor([0, 2, 2, 1, 0])
    m = CausalEmbeddings(
        4, 5, 3, item_buckets=buckets, n_buckets=3, generator=torch.Generator().manual_seed(3)
    )
    assert m.item.shape == (5, 3) and m.item_pop.shape == (3, 3)  # the id table: interest only
    exp = m.export()
    torch.testing.assert_close(exp["item_conformity"], m.item_pop.detach()[buckets])
    torch.testing.assert_close(exp["item_interest"], m.item.detach())
    s = m(torch.tensor([0, 1]), torch.tensor([1, 3]), torch.tensor([2, 4]))
    # items 1 and 2 share bucket 2: their conformity scores are equal, so the difference is 0
    assert float(s.diff["conformity"][0].detach()) == 0.0
    s.click.sum().backward()
    assert float(m.item_pop.grad[[0, 1]].abs().sum()) > 0  # buckets 1 (item 3) and 0 (item 4) learn
    assert float(m.item_pop.grad[2].abs().sum()) == 0.0  # bucket 2's two items cancel in the pair


def test_set_rows_with_popularity_conformity_gives_each_bucket_its_items_mean():
    buckets = torch.tensor([0, 2, 2, 1, 0])
    m = CausalEmbeddings(4, 5, 3, item_buckets=buckets, n_buckets=4)
    user, item = torch.randn(4, 6), torch.randn(5, 6)
    m.set_rows(user, item)
    exp = m.export()
    torch.testing.assert_close(exp["user_interest"], user[:, :3])
    torch.testing.assert_close(exp["item_interest"], item[:, :3])
    torch.testing.assert_close(m.item_pop.detach()[2], item[[1, 2], 3:].mean(0))
    torch.testing.assert_close(m.item_pop.detach()[3], torch.zeros(3))  # no item in bucket 3


def test_scalar_conformity_is_a_user_coefficient_times_a_fixed_popularity_level():
    buckets = torch.tensor([0, 2, 2, 1, 0])
    m = CausalEmbeddings(3, 5, 4, item_buckets=buckets, n_buckets=3, fixed_levels=True)
    assert "item_pop" not in dict(m.named_parameters())  # fixed: a buffer, never trained
    levels = torch.tensor([0.0, 0.5, 0.5, 0.25, 0.0])  # bucket / 4
    exp = m.export()
    torch.testing.assert_close(exp["item_conformity"][:, 0], levels)
    assert float(exp["item_conformity"][:, 1:].abs().sum()) == 0.0
    # conformity(u, i) - conformity(u, j) = c_u (level_i - level_j), c_u the row's first coordinate
    u, i, j = torch.tensor([0, 2]), torch.tensor([1, 3]), torch.tensor([0, 2])
    s = m(u, i, j)
    c = m.user.detach()[u, 4]
    torch.testing.assert_close(s.diff["conformity"].detach(), c * (levels[i] - levels[j]))
    s.diff["conformity"].sum().backward()
    g = m.user.grad[:, 4:]
    assert float(g[:, 1:].abs().sum()) == 0.0 and float(g[0, 0]) == pytest.approx(0.5)
    # a warm start sets the users' and the interest rows; the levels stay
    user, item = torch.randn(3, 8), torch.randn(5, 8)
    item[:, 4:] = 0.0
    item[:, 4] = 2.0 * levels  # the base's conformity: twice these levels
    m.set_rows(user, item)
    exp = m.export()
    torch.testing.assert_close(exp["item_conformity"][:, 0], levels)
    torch.testing.assert_close(exp["item_interest"], item[:, :4])
    # c_u reproduces the base's conformity scores: 2 * the base user's first coordinate, the rest 0
    torch.testing.assert_close(exp["user_conformity"][:, 0], 2.0 * user[:, 4])
    assert float(exp["user_conformity"][:, 1:].abs().sum()) == 0.0
    # from free conformity rows: the least-squares c_u of u_con . i_con over the items
    free = torch.randn(5, 8)
    m.set_rows(user, free)
    want = (free[:, 4:] @ user[:, 4:].T * levels[:, None]).sum(0) / levels.pow(2).sum()
    torch.testing.assert_close(m.export()["user_conformity"][:, 0], want)


def test_scalar_conformity_needs_the_mf_backbone():
    from reward_models.config import ModelConfig

    with pytest.raises(ValueError, match="scalar needs model.backbone mf"):
        ModelConfig(conformity="scalar", backbone="lightgcn")
