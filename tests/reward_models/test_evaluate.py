"""The synthetic sections of the evaluation: id alignment with truth/, signs, the uniform-test protocol."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from data_pipelines.dataset import Dataset
from data_pipelines.synth import Truth
from reward_models.data import RewardData
from reward_models.evaluate import Vectors, truth_sample, truth_spearman, uniform_metrics


@pytest.fixture(scope="module")
def data(tiny_synth) -> RewardData:
    return RewardData.load(tiny_synth, "intervened", 0)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def test_truth_sample_matches_truth_api_by_id(data, tiny_synth):
    """The sample's truth, computed in index space, equals Truth's scores looked up by id strings."""
    t = truth_sample(data, n=20, seed=1)
    truth = Truth(tiny_synth)
    uid = np.repeat(data.users["id"].to_numpy()[t.users], t.items.shape[1])
    iid = data.items["id"].to_numpy()[t.items.ravel()]
    np.testing.assert_allclose(t.interest.ravel(), truth.interest(uid, iid), rtol=1e-5, atol=1e-6)
    items = pl.read_parquet(truth.dir / "items.parquet", columns=["item_id", "exposure"])
    expo = dict(zip(items["item_id"].to_list(), items["exposure"].to_list(), strict=True))
    mean = np.mean(list(expo.values()))
    want = truth.conformity(uid) * np.log1p(np.array([expo[i] for i in iid]) / mean)
    np.testing.assert_allclose(t.conformity.ravel(), want, rtol=1e-9)
    # only warm users and warm items enter, each user's items distinct
    assert data.seen_users()[t.users].all() and data.seen_items()[t.items].all()
    assert all(len(set(row)) == row.size for row in t.items)


def test_truth_sample_holds_the_price_term_and_is_chunked(tmp_path, monkeypatch):
    """With ``price_preference`` the sample's truth is Truth.interest (vectors + price term), at any chunk."""
    import reward_models.evaluate as ev
    from data_pipelines.synth import SynthConfig, write

    write(SynthConfig(n_users=80, n_items=60, rounds=3, seed=2, price_preference=1.0), tmp_path / "p")
    data = RewardData.load(tmp_path / "p", "intervened", 0)
    whole = truth_sample(data, n=10, seed=0)
    monkeypatch.setattr(ev, "PAIRS_PER_CHUNK", 25)  # 2 users per chunk
    chunked = truth_sample(data, n=10, seed=0)
    np.testing.assert_array_equal(chunked.interest, whole.interest)
    truth = Truth(tmp_path / "p")
    uid = np.repeat(data.users["id"].to_numpy()[whole.users], whole.items.shape[1])
    iid = data.items["id"].to_numpy()[whole.items.ravel()]
    np.testing.assert_allclose(whole.interest.ravel(), truth.interest(uid, iid), rtol=1e-5, atol=1e-6)
    vectors_only = (
        truth.user_vectors[truth.user_index(uid)] * truth.item_vectors[truth.item_index(iid)]
    ).sum(1)
    assert np.abs(whole.interest.ravel() - vectors_only / 4.0).max() > 0.1  # the price term is there


def test_true_vectors_give_spearman_one_and_negated_minus_one(data):
    t = truth_sample(data, n=20)
    c_u = Truth(data.root).conformity(data.users["id"].to_numpy())
    oracle = Vectors(
        {"interest": _t(t.user_vectors), "conformity": _t(c_u[:, None])},
        {"interest": _t(t.item_vectors), "conformity": _t(t.pop[:, None])},
    )
    res = truth_spearman(oracle, data, n=20)
    assert res["interest_spearman"] == pytest.approx(1.0)
    assert res["conformity_spearman"] == pytest.approx(1.0)
    assert res["interest_spearman_users"] == t.users.size
    flipped = Vectors({"interest": -_t(t.user_vectors)}, {"interest": _t(t.item_vectors)})
    assert truth_spearman(flipped, data, n=20)["interest_spearman"] == pytest.approx(-1.0)
    assert "conformity_spearman" not in truth_spearman(flipped, data, n=20)  # one branch: no conformity


def _uniform_sets(data: RewardData, tiny_synth) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """Per user index: the uniformly shown items and the positive ones, straight from the rows."""
    rows = Dataset(tiny_synth / "uniform_test").interactions().collect()
    umap = dict(zip(data.users["id"].to_list(), data.users["index"].to_list(), strict=True))
    imap = dict(zip(data.items["id"].to_list(), data.items["index"].to_list(), strict=True))
    shown: dict[int, set[int]] = {}
    pos: dict[int, set[int]] = {}
    for u, i, e in rows.select("user_id", "item_id", "event").iter_rows():
        (shown if e == "impression" else pos).setdefault(umap[u], set()).add(imap[i])
    return shown, pos


def test_uniform_protocol_candidates_and_hand_values(data, tiny_synth):
    shown, pos = _uniform_sets(data, tiny_synth)
    ds = Dataset(tiny_synth / "uniform_test")
    n_users, n_items = data.n_users, data.n_items
    top = np.zeros((n_users, n_items))
    for u, items in pos.items():
        top[u, list(items)] = 1.0
    # positives first among the shown items, and every unshown item far above them: the
    # unshown items must not compete (only the user's uniform slate is ranked)
    shown_mask = np.zeros((n_users, n_items), dtype=bool)
    for u, items in shown.items():
        shown_mask[u, list(items)] = True
    best = np.where(shown_mask, top, 1000.0)
    res = uniform_metrics(lambda u, i: best[u, i], data, ds)
    warm_with_pos = [u for u in pos if data.seen_users()[u]]
    assert res["uniform.n_users"] == len(warm_with_pos)
    assert all(pos[u] <= shown[u] for u in pos)
    assert res["uniform.ndcg@10"] == pytest.approx(1.0)  # a slate holds < 10 positives here
    assert max(len(pos[u]) for u in warm_with_pos) <= 10
    worst = uniform_metrics(lambda u, i: -top[u, i], data, ds)
    # 20 shown items, positives ranked last: hits in the top 10 only if a user has > 10 positives
    assert worst["uniform.ndcg@10"] == pytest.approx(0.0)
    # hand case: one user with one positive, scored 2nd of its slate (NDCG 1/log2(3)), then 1st
    # (NDCG 1); every other user is unchanged, so the mean moves by (1 - 1/log2(3)) / n_users
    u = next(u for u in warm_with_pos if len(pos[u]) == 1)
    (p,) = pos[u]
    scores = np.zeros((n_users, n_items))
    scores[u, min(shown[u] - {p})], scores[u, p] = 2.0, 1.0
    second = uniform_metrics(lambda u, i: scores[u, i], data, ds)["uniform.ndcg@10"]
    scores[u, p] = 3.0
    first = uniform_metrics(lambda u, i: scores[u, i], data, ds)["uniform.ndcg@10"]
    assert (first - second) * len(warm_with_pos) == pytest.approx(1.0 - 1.0 / np.log2(3))
