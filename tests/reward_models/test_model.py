"""Causal embeddings: LightGCN propagation against a dense reference, scores, export."""

from __future__ import annotations

import numpy as np
import torch

from reward_models.model import CausalEmbeddings, normalized_adjacency, propagate


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
    for b in ("interest", "conformity"):
        e0 = torch.cat([m.raw("user", b), m.raw("item", b)]).detach().numpy()
        ref = dense_reference(user, item, 3, 3, e0, 2)
        np.testing.assert_allclose(torch.cat([t.user[b], t.item[b]]).detach().numpy(), ref, atol=1e-5)
    s = m(torch.tensor([0, 1]), torch.tensor([0, 2]), torch.tensor([1, 1]))
    (s.click("pos") - s.click("neg")).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())


def test_click_is_interest_plus_conformity_and_export():
    m = CausalEmbeddings(4, 5, 3, generator=torch.Generator().manual_seed(1))
    u, i, j = torch.tensor([0, 3]), torch.tensor([1, 4]), torch.tensor([2, 0])
    s = m(u, i, j)
    exp = m.export()
    assert set(exp) == {"user_interest", "item_interest", "user_conformity", "item_conformity"}
    want = (exp["user_interest"][u] * exp["item_interest"][i]).sum(-1) + (
        exp["user_conformity"][u] * exp["item_conformity"][i]
    ).sum(-1)
    torch.testing.assert_close(s.click("pos").detach(), want)
    mf = CausalEmbeddings(4, 5, 3, disentangle=False)
    assert set(mf.export()) == {"user_interest", "item_interest"} and not mf.disentangled
