"""Cold-start and Coat evaluations of stage 1 (``benchmarks/reward_cold.py`` runs them).

- ``cold_user_ranking``: every item ranked for each cold user (its ``cold_profile``
  items masked: they are history, not a recommendation), truth = its ``cold_test``.
- ``cold_item_ranking``: for each user with test positives, only never-trained items
  ranked (the ``cold_items`` protocol asks "which new item will this user like?").
- ``random_test_ndcg``: Coat's protocol: each user's uniformly random rated items
  (``logging_policy == "uniform_random"``, 16 per user) ranked, relevant = rating >= 4.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from data_pipelines.dataset import Dataset
from data_pipelines.metrics import csr_from_pairs, csr_rows, full_sort_topk, ranking_metrics, topk_from_scores
from reward_models.data import RewardData, index_pairs
from reward_models.evaluate import Scorer, union


def _pairs(frame: pl.DataFrame, data: RewardData) -> tuple[np.ndarray, np.ndarray]:
    f = index_pairs(frame, data.users, data.items) if frame.height else pl.DataFrame({"u": [], "i": []})
    return f["u"].to_numpy().astype(np.int64), f["i"].to_numpy().astype(np.int64)


def cold_user_ranking(scorer: Scorer, data: RewardData, ks: Sequence[int]) -> dict[str, float]:
    """Full-sort metrics of ``scorer`` on the cold users' ``cold_test`` (profile and train items masked)."""
    tu, ti = _pairs(data.cold_test, data)
    pu, pi = _pairs(data.cold_profile, data)
    truth = csr_from_pairs(tu, ti, data.n_users)
    exclude = union(data.train, csr_from_pairs(pu, pi, data.n_users))
    users = np.flatnonzero(truth.lengths() > 0)
    if users.size == 0:
        return {"n_users": 0.0}
    topk = full_sort_topk(scorer, users, data.n_items, exclude, max(ks))
    return ranking_metrics(topk, csr_rows(truth, users), ks) | {"n_users": float(users.size)}


def cold_item_ranking(scorer: Scorer, data: RewardData, ks: Sequence[int]) -> dict[str, float]:
    """Metrics of ranking only never-trained items for each user with test positives on them."""
    cand = np.flatnonzero(~data.seen_items())
    pos = np.full(data.n_items, -1)
    pos[cand] = np.arange(cand.size)
    rows = data.test.row_ids()
    keep = pos[data.test.indices] >= 0
    truth = csr_from_pairs(rows[keep], pos[data.test.indices[keep]], data.n_users)
    users = np.flatnonzero(truth.lengths() > 0)
    if users.size == 0 or cand.size == 0:
        return {"n_users": 0.0}
    ks = [k for k in ks if k <= cand.size]
    topk = topk_from_scores(scorer(users)[:, cand], max(ks))
    out = ranking_metrics(topk, csr_rows(truth, users), ks)
    return out | {"n_users": float(users.size), "n_candidates": float(cand.size)}


def category_popularity(ds: Dataset, data: RewardData) -> np.ndarray:
    """[n_items] mean train popularity of the warm items of each item's category (0: no category)."""
    cat = (
        data.items.join(ds.items().select(pl.col("item_id").alias("id"), "category"), on="id", how="left")
        .sort("index")["category"]
        .fill_null("")
        .to_numpy()
    )
    warm = data.seen_items()
    means = {c: data.popularity[warm & (cat == c)].mean() for c in np.unique(cat[warm]) if c != ""}
    return np.array([means.get(c, 0.0) for c in cat], dtype=np.float32)


def random_test_ndcg(
    scorer: Scorer, ds: Dataset, data: RewardData, k: int = 5, min_value: float = 4.0
) -> dict:
    """Mean NDCG@k of ranking each user's ``uniform_random`` rated items (relevant: value >= min_value)."""
    rand = ds.interactions().filter(pl.col("logging_policy") == "uniform_random").collect()
    f = index_pairs(rand, data.users, data.items).select(
        "u", "i", (pl.col("value") >= min_value).alias("rel")
    )
    ndcgs = []
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    for (u,), g in f.group_by("u"):
        rel = g["rel"].to_numpy()
        if not rel.any():
            continue
        s = scorer(np.array([u]))[0][g["i"].to_numpy()]
        order = np.argsort(-s, kind="stable")[:k]
        ideal = disc[: min(k, int(rel.sum()))].sum()
        ndcgs.append(float((rel[order] * disc[: order.size]).sum() / ideal))
    return {f"ndcg@{k}": float(np.mean(ndcgs)) if ndcgs else float("nan"), "n_users": len(ndcgs)}
