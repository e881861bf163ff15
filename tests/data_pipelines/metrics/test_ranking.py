"""Ranking metrics: hand-computed values (RecBole definitions), masking, ties, chunking, and a
per-user Python reference on random data."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import data_pipelines.metrics.ranking as ranking
from data_pipelines.metrics import (
    csr_from_frame,
    csr_from_lists,
    evaluate_full_sort,
    full_sort_topk,
    per_user_ranking_metrics,
    ranking_metrics,
    topk_from_scores,
)

L3 = 1 / math.log2(3)  # discount of rank 2 = 0.6309...
L4 = 1 / math.log2(4)  # discount of rank 3 = 0.5

# Four users, six items. |T| = 4 > k (user 0), |T| = 1 < k (user 1), no test items (user 2,
# left out of every average), |T| = 2 (user 3: ideal DCG over min(3, 2) = 2 ranks at k = 3).
TOPK = np.array([[1, 2, 3], [4, 0, 5], [0, 1, 2], [5, 3, 1]])
TRUTH = [[2, 3, 5, 0], [4], [], [1, 4]]


def test_hand_computed_k2():
    m = ranking_metrics(TOPK, TRUTH, ks=(2,))
    # hits: u0 [0, 1], u1 [1, 0], u3 [0, 0]
    assert m["recall@2"] == pytest.approx((1 / 4 + 1 + 0) / 3)
    assert m["precision@2"] == pytest.approx((1 / 2 + 1 / 2 + 0) / 3)
    assert m["hit@2"] == pytest.approx(2 / 3)
    assert m["mrr@2"] == pytest.approx((1 / 2 + 1 + 0) / 3)
    # u0: DCG = 1/log2(3), IDCG over min(2, 4) = 2 ranks = 1 + 1/log2(3); u1: 1 / 1
    assert m["ndcg@2"] == pytest.approx((L3 / (1 + L3) + 1 + 0) / 3)
    assert m["ndcg@2"] == pytest.approx((0.386853 + 1) / 3, abs=1e-6)


def test_hand_computed_k3():
    m = ranking_metrics(TOPK, TRUTH, ks=(3,))
    # hits: u0 [0, 1, 1], u1 [1, 0, 0], u3 [0, 0, 1]
    assert m["recall@3"] == pytest.approx((2 / 4 + 1 + 1 / 2) / 3)
    assert m["precision@3"] == pytest.approx((2 / 3 + 1 / 3 + 1 / 3) / 3)
    assert m["hit@3"] == pytest.approx(1.0)
    assert m["mrr@3"] == pytest.approx((1 / 2 + 1 + 1 / 3) / 3)
    u0 = (L3 + L4) / (1 + L3 + L4)  # IDCG over min(3, 4) = 3 ranks
    u1 = 1.0  # IDCG over min(3, 1) = 1 rank
    u3 = L4 / (1 + L3)  # IDCG over min(3, 2) = 2 ranks (not 3)
    assert m["ndcg@3"] == pytest.approx((u0 + u1 + u3) / 3)
    assert m["ndcg@3"] == pytest.approx((0.530721 + 1 + 0.306574) / 3, abs=1e-6)


def test_keys_are_metric_major_and_k2_equals_prefix():
    m = ranking_metrics(TOPK, TRUTH, ks=(2, 3))
    assert list(m) == [f"{n}@{k}" for n in ("recall", "mrr", "ndcg", "hit", "precision") for k in (2, 3)]
    assert m["ndcg@2"] == ranking_metrics(TOPK[:, :2], TRUTH, ks=(2,))["ndcg@2"]


def test_per_user_nan_for_users_without_test_items():
    p = per_user_ranking_metrics(TOPK, TRUTH, ks=(3,))
    assert np.isnan(p["recall@3"][2]) and np.isnan(p["ndcg@3"][2])
    np.testing.assert_allclose(p["recall@3"][[0, 1, 3]], [0.5, 1.0, 0.5])
    np.testing.assert_allclose(p["mrr@3"][[0, 1, 3]], [1 / 2, 1.0, 1 / 3])
    np.testing.assert_array_equal(p["n_test"], [4, 1, 0, 2])
    assert ranking_metrics(TOPK, TRUTH, ks=(3,))["recall@3"] == pytest.approx(np.nanmean(p["recall@3"]))


def test_truth_formats_agree():
    csr = csr_from_lists(TRUTH)
    by_tuple = ranking_metrics(TOPK, (csr.indptr, csr.indices), ks=(2, 3))
    assert by_tuple == ranking_metrics(TOPK, TRUTH, ks=(2, 3)) == ranking_metrics(TOPK, csr, ks=(2, 3))


def test_no_test_items_at_all_is_an_error():
    with pytest.raises(ValueError, match="no user has a test item"):
        ranking_metrics(TOPK, [[], [], [], []], ks=(2,))
    with pytest.raises(ValueError, match="every k"):
        ranking_metrics(TOPK, TRUTH, ks=(4,))


def test_train_and_valid_items_are_masked():
    # user 0 trained on item 0 and validated on item 1 (the two highest scores); test item 3
    scores = np.array([[0.9, 0.8, 0.1, 0.5, 0.2], [0.1, 0.2, 0.3, 0.4, 0.5]])
    train = pl.DataFrame({"user_index": [0, 1], "item_index": [0, 4]})
    valid = pl.DataFrame({"user_index": [0], "item_index": [1]})
    test = pl.DataFrame({"user_index": [0, 1], "item_index": [3, 3]})
    exclude = csr_from_frame(pl.concat([train, valid]), n_users=2)
    np.testing.assert_array_equal(topk_from_scores(scores, 2, exclude), [[3, 4], [3, 2]])
    np.testing.assert_array_equal(topk_from_scores(scores, 2), [[0, 1], [4, 3]])
    m = evaluate_full_sort(lambda u: scores[u], None, 5, exclude, csr_from_frame(test, 2), ks=(1,))
    assert m["hit@1"] == 1.0 and m["mrr@1"] == 1.0
    assert scores[0, 0] == 0.9  # the caller's scores are not modified


def test_ties_go_to_the_lower_item_index():
    scores = np.array([[0.5, 0.9, 0.5, 0.5, 0.1], [1.0, 1.0, 1.0, 1.0, 1.0], [0.0, 2.0, 2.0, 1.0, 2.0]])
    np.testing.assert_array_equal(topk_from_scores(scores, 2), [[1, 0], [0, 1], [1, 2]])
    np.testing.assert_array_equal(topk_from_scores(scores, 3), [[1, 0, 2], [0, 1, 2], [1, 2, 4]])
    # fewer unmasked items than k: masked items (-inf) fill the end, lowest index first
    np.testing.assert_array_equal(topk_from_scores(scores[:1], 4, [[1, 2, 3]]), [[0, 4, 1, 2]])
    # NaN counts as -inf
    np.testing.assert_array_equal(topk_from_scores([[np.nan, 1.0, 0.0]], 2), [[1, 2]])


def test_ties_are_deterministic_on_large_tied_rows():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 3, size=(50, 500)).astype(np.float32)
    top = topk_from_scores(scores, 20)
    expected = np.stack([sorted(range(500), key=lambda i, r=r: (-r[i], i))[:20] for r in scores])
    np.testing.assert_array_equal(top, expected)


@pytest.mark.parametrize("batch_users", [1, 3, 7, 1024])
def test_chunked_evaluation_equals_unchunked(batch_users):
    rng = np.random.default_rng(1)
    n_users, n_items = 23, 60
    scores = rng.normal(size=(n_users, n_items))
    exclude = csr_from_lists(
        [rng.choice(n_items, size=rng.integers(0, 10), replace=False) for _ in range(n_users)]
    )
    truth = [rng.choice(n_items, size=rng.integers(0, 6), replace=False) for _ in range(n_users)]
    calls = []

    def score_fn(users):
        calls.append(len(users))
        return scores[users]

    got = evaluate_full_sort(score_fn, np.arange(n_users), n_items, exclude, truth, (5, 10, 20), batch_users)
    want = ranking_metrics(topk_from_scores(scores, 20, exclude), truth, (5, 10, 20))
    assert got == want
    assert max(calls) <= batch_users and sum(calls) == n_users
    # users=None: every user with a test item (the others do not count anyway)
    assert evaluate_full_sort(score_fn, None, n_items, exclude, truth, (5, 10, 20), batch_users) == want


def test_full_sort_accepts_torch_scores_and_subsets_of_users():
    torch = pytest.importorskip("torch")
    scores = np.random.default_rng(2).normal(size=(10, 30))
    users = np.array([7, 2, 2, 5])
    exclude = [[0, 1]] * 10
    top = full_sort_topk(lambda u: torch.from_numpy(scores[u]), users, 30, exclude, 5, batch_users=3)
    np.testing.assert_array_equal(top, topk_from_scores(scores[users], 5, [[0, 1]] * 4))


@settings(max_examples=60, deadline=None)
@given(
    n_items=st.integers(1, 12),
    k=st.integers(1, 12),
    data=st.data(),
)
def test_shared_scores_rank_as_every_users_full_row(n_items, k, data):
    """One [I] array shared by every user (popularity) gives the lists of the full rows, ties,
    NaN, -inf and users with fewer than k items left included."""
    k = min(k, n_items)
    values = st.sampled_from([0.0, 1.0, 2.0, -math.inf, math.nan, 0.5])
    scores = np.array(data.draw(st.lists(values, min_size=n_items, max_size=n_items)), dtype=np.float32)
    n_users = data.draw(st.integers(1, 6))
    exclude = [data.draw(st.lists(st.integers(0, n_items - 1), max_size=n_items)) for _ in range(n_users)]
    users = np.array(data.draw(st.lists(st.integers(0, n_users - 1), min_size=1, max_size=8)))
    full = full_sort_topk(lambda u: np.tile(scores, (len(u), 1)), users, n_items, exclude, k, batch_users=3)
    shared = full_sort_topk(scores, users, n_items, exclude, k, batch_users=3)
    np.testing.assert_array_equal(shared, full)
    np.testing.assert_array_equal(full_sort_topk(scores, users, n_items, None, k), full_sort_topk(
        lambda u: np.tile(scores, (len(u), 1)), users, n_items, None, k))  # fmt: skip


def test_score_fn_shape_is_checked():
    with pytest.raises(ValueError, match="shared scores must have shape \\(5,\\)"):
        full_sort_topk(np.zeros(4), [0, 1], 5, None, 2)
    with pytest.raises(ValueError, match="expected \\(2, 5\\)"):
        full_sort_topk(lambda u: np.zeros((len(u), 4)), [0, 1], 5, None, 2)


# ---------------------------------------------------------------- reference (per user, Python)


def reference_topk(scores, k, exclude):
    out = []
    for u, row in enumerate(scores):
        s = [(-math.inf if (i in exclude[u] or math.isnan(v)) else v) for i, v in enumerate(row)]
        out.append(sorted(range(len(s)), key=lambda i, s=s: (-s[i], i))[:k])
    return np.array(out, dtype=np.int64)


def reference_metrics(topk, truth, ks):
    sums = {f"{m}@{k}": 0.0 for m in ("recall", "mrr", "ndcg", "hit", "precision") for k in ks}
    users = [u for u in range(len(truth)) if truth[u]]
    for u in users:
        t = set(truth[u])
        for k in ks:
            hits = [int(i in t) for i in topk[u][:k]]
            first = next((j + 1 for j, h in enumerate(hits) if h), None)
            dcg = sum(h / math.log2(j + 2) for j, h in enumerate(hits))
            idcg = sum(1 / math.log2(j + 2) for j in range(min(k, len(t))))
            sums[f"recall@{k}"] += sum(hits) / len(t)
            sums[f"mrr@{k}"] += 1 / first if first else 0.0
            sums[f"ndcg@{k}"] += dcg / idcg
            sums[f"hit@{k}"] += float(sum(hits) > 0)
            sums[f"precision@{k}"] += sum(hits) / k
    return {name: v / len(users) for name, v in sums.items()}


@st.composite
def ranking_cases(draw):
    n_users = draw(st.integers(1, 6))
    n_items = draw(st.integers(1, 12))
    scores = draw(
        st.lists(
            st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, math.nan]), min_size=n_items, max_size=n_items),
            min_size=n_users,
            max_size=n_users,
        )
    )
    subset = st.sets(st.integers(0, n_items - 1))
    exclude = [sorted(draw(subset)) for _ in range(n_users)]
    truth = [sorted(draw(subset)) for _ in range(n_users)]
    ks = sorted(draw(st.sets(st.integers(1, n_items), min_size=1, max_size=3)))
    return np.array(scores), exclude, truth, ks


@settings(max_examples=200, deadline=None)
@given(ranking_cases())
def test_matches_per_user_python_reference(case):
    scores, exclude, truth, ks = case
    top = topk_from_scores(scores, max(ks), exclude)
    np.testing.assert_array_equal(top, reference_topk(scores, max(ks), [set(e) for e in exclude]))
    if not any(truth):
        return
    got = ranking_metrics(top, truth, ks)
    want = reference_metrics(top.tolist(), truth, ks)
    assert list(got) == list(want)
    for name in want:
        assert got[name] == pytest.approx(want[name], abs=1e-12), name


def test_matches_reference_on_random_data_at_default_ks():
    rng = np.random.default_rng(3)
    n_users, n_items = 40, 200
    scores = rng.normal(size=(n_users, n_items)).round(1)  # rounding makes ties
    exclude = [
        set(rng.choice(n_items, size=rng.integers(0, 30), replace=False).tolist()) for _ in range(n_users)
    ]
    truth = [rng.choice(n_items, size=rng.integers(0, 70), replace=False).tolist() for _ in range(n_users)]
    top = topk_from_scores(scores, 50, [sorted(e) for e in exclude])
    np.testing.assert_array_equal(top, reference_topk(scores, 50, exclude))
    got, want = ranking_metrics(top, truth), reference_metrics(top.tolist(), truth, (10, 20, 50))
    assert got == pytest.approx(want, abs=1e-12)


def test_topk_is_independent_of_the_row_block_size(monkeypatch):
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 4, size=(37, 30)).astype(float)
    exclude = [rng.choice(30, size=rng.integers(0, 8), replace=False) for _ in range(37)]
    want = topk_from_scores(scores, 10, exclude)
    monkeypatch.setattr(ranking, "_BLOCK_SCORES", 30 * 4)  # 4 users per block
    np.testing.assert_array_equal(topk_from_scores(scores, 10, exclude), want)
    np.testing.assert_array_equal(want, reference_topk(scores, 10, [set(e.tolist()) for e in exclude]))
