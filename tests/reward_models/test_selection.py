"""Model selection: the target's order and the stable uniform halves."""

from __future__ import annotations

import numpy as np
import torch

from reward_models.data import RewardData
from reward_models.exposure import Exposure
from reward_models.selection import EXPOSURE, NDCG, UNIFORM, choose, load_uniform_half, report_side


def test_report_side_is_a_stable_half_of_the_ids():
    ids = [f"u{k}" for k in range(4000)]
    side = report_side(ids)
    assert abs(side.mean() - 0.5) < 0.03
    # a user's side depends on its id only: not on the order or on the other users
    assert np.array_equal(report_side(ids[::-1])[::-1], side)
    assert report_side(ids[7:8])[0] == side[7]


def test_selection_prefers_impressions_then_the_uniform_half_then_ndcg(tiny_synth):
    data = RewardData.load(tiny_synth, "intervened")
    half = load_uniform_half(data)
    assert half is not None and half.source == "uniform_test"
    assert not set(half.select_users) & set(half.report_users)
    assert choose("auto", data, half) == UNIFORM
    assert choose("auto", data, None) == NDCG
    v = np.flatnonzero(data.valid.lengths() > 0)[:3]
    empty = np.zeros(0, np.int64)
    data.exposure = Exposure(empty, empty, v, np.zeros(3, np.int64))
    assert choose("auto", data, half) == EXPOSURE
    assert choose("ndcg", data, half) == NDCG
    # `uniform`: the uniform half before the impressions; without a half, the auto order
    assert choose("uniform", data, half) == UNIFORM
    assert choose("uniform", data, None) == EXPOSURE
    # held-out impressions of users without a valid positive cannot be compared: skipped
    no_valid = np.flatnonzero(data.valid.lengths() == 0)[:3]
    data.exposure = Exposure(empty, empty, no_valid, np.zeros(3, np.int64))
    assert choose("auto", data, half) == UNIFORM


def test_coat_halves_rank_each_users_random_items(tmp_path):
    import polars as pl

    from data_pipelines.splits import PositivesRule
    from reward_models.evaluate import users_ranking
    from tests.data_pipelines.splits.helpers import coat_rows, make_dataset

    ds = make_dataset(tmp_path / "coat", coat_rows(), source="coat")
    data = RewardData.load(ds, "native", 0, PositivesRule(min_value=4))
    half = load_uniform_half(data)
    assert half is not None and half.source == "native_test"
    rand = ds.interactions().filter(pl.col("logging_policy") == "uniform_random").collect()
    assert int(half.candidates.lengths().sum()) == rand.select("user_id", "item_id").unique().height
    users = np.union1d(half.select_users, half.report_users)
    assert np.array_equal(users, np.flatnonzero((data.test.lengths() > 0) & data.seen_users()))
    truth = half.truth

    def oracle(u: np.ndarray, i: np.ndarray) -> np.ndarray:  # a relevant random item scores 1, the rest 0
        return np.array([float(item in truth.row(int(user))) for user, item in zip(u, i, strict=True)])

    assert users_ranking(oracle, data, truth, half.candidates, half.report_users, "h")["h.ndcg@5"] == 1.0


def test_scoring_only_the_candidate_pairs_ranks_as_the_full_rows_do(tiny_synth):
    from data_pipelines.metrics import csr_rows, topk_from_scores
    from reward_models.evaluate import Vectors, candidates_topk

    data = RewardData.load(tiny_synth, "intervened")
    half = load_uniform_half(data)
    g = torch.Generator().manual_seed(0)
    vec = Vectors({"interest": torch.randn(data.n_users, 4, generator=g)},
                  {"interest": torch.randn(data.n_items, 4, generator=g)})  # fmt: skip
    users = half.select_users
    full = vec.scorer()(users).astype(np.float64)
    full[:, ::7] = full[:, :1]  # ties with the first item: the lower index goes first in both
    c = csr_rows(half.candidates, users)
    masked = np.full(full.shape, -np.inf)  # the full rows with every unexposed item masked
    masked[c.row_ids(), c.indices] = full[c.row_ids(), c.indices]
    k = 10
    dense = topk_from_scores(masked, k)
    pairs = candidates_topk(lambda u, i: full[np.searchsorted(users, u), i], half.candidates, users, k, -1)
    n = np.minimum(c.lengths(), k)  # the full sort fills short rows with masked items; candidates_topk pads
    assert (n == k).any()
    for row in range(users.size):
        assert pairs[row, : n[row]].tolist() == dense[row, : n[row]].tolist()
        assert (pairs[row, n[row] :] == -1).all()
    r = c.row_ids()  # the chunked pair scorer scores as the full rows do
    assert np.allclose(vec.pair_scorer()(users[r], c.indices), vec.scorer()(users)[r, c.indices], atol=1e-5)
    # by hand: user 0 has candidates 5 (score 1), 2 (score 3), 7 (score 2); k = 4 pads with n_items
    from data_pipelines.metrics import csr_from_pairs

    cand = csr_from_pairs([0, 0, 0], [5, 2, 7], 1)
    score = {5: 1.0, 2: 3.0, 7: 2.0}
    top = candidates_topk(lambda u, i: np.array([score[int(x)] for x in i]), cand, np.array([0]), 4, 99)
    assert top.tolist() == [[2, 7, 5, 99]]
