"""Full-sort top-K ranking metrics with RecBole's definitions (binary relevance).

For a user with test items T (|T| >= 1) and top-K list r_1..r_K, with hit_j = [r_j in T]:

    recall@K    = sum_j hit_j / |T|
    precision@K = sum_j hit_j / K
    hit@K (HR)  = [sum_j hit_j > 0]
    mrr@K       = 1 / (first j with hit_j), 0 if none within K
    ndcg@K      = sum_j hit_j / log2(j + 1)  /  sum_{j <= min(K, |T|)} 1 / log2(j + 1)

Each is averaged over users with at least one test item. Train and valid items are masked
(score -inf) before the top-K is taken. See docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from data_pipelines.metrics.csr import as_csr, csr_rows

#: Metric names in the order they appear in the returned dicts.
RANKING_METRICS: tuple[str, ...] = ("recall", "mrr", "ndcg", "hit", "precision")
DEFAULT_KS: tuple[int, ...] = (10, 20, 50)

ScoreFn = Callable[[np.ndarray], Any]

#: Scores handled at once by ``topk_from_scores`` (bounds its temporaries to ~50 MB).
_BLOCK_SCORES = 1 << 22


def topk_from_scores(scores: Any, k: int, exclude: Any = None) -> np.ndarray:
    """Indices of the k highest-scoring items per user, best first; [U, k] int64.

    scores: [U, I] float (not modified); NaN counts as -inf. exclude: items to mask per user
    (anything ``as_csr`` reads, with U rows: CSR, scipy sparse, bool mask [U, I], list of
    arrays) or None; masked items get -inf. Ties (including -inf) go to the lower item index,
    so the result is deterministic. When fewer than k items are unmasked, the list is filled
    with masked items (lowest index first), as RecBole's full sort does.

    argpartition (O(I) per user), then ties at the k-th value are settled by index and only the
    k survivors are sorted. Rows are processed in blocks of about 2^22 scores, so temporaries
    stay small whatever U is.
    """
    s = _to_numpy(scores)
    if s.ndim != 2:
        raise ValueError(f"scores must be [U, I]; got shape {s.shape}")
    n_users, n_items = s.shape
    if not 1 <= k <= n_items:
        raise ValueError(f"k must be in [1, {n_items}] (the number of items); got {k}")
    mask = None if exclude is None else as_csr(exclude, n_users)
    if mask is not None and mask.indices.size and mask.indices.max() >= n_items:
        raise ValueError(f"exclude holds item {mask.indices.max()} but scores have {n_items} items")
    dtype = s.dtype if s.dtype in (np.float32, np.float64) else np.float64
    out = np.empty((n_users, k), dtype=np.int64)
    step = max(1, _BLOCK_SCORES // n_items)
    for start in range(0, n_users, step):
        stop = min(start + step, n_users)
        block = np.array(s[start:stop], dtype=dtype, copy=True)
        nan = np.isnan(block)
        if nan.any():
            block[nan] = -np.inf
        if mask is not None:
            sub = csr_rows(mask, np.arange(start, stop))
            block[sub.row_ids(), sub.indices] = -np.inf
        out[start:stop] = _topk_block(block, k)
    return out


def _topk_block(s: np.ndarray, k: int) -> np.ndarray:
    n_items = s.shape[1]
    top = np.argpartition(s, n_items - k, axis=1)[:, n_items - k :]
    kth = np.take_along_axis(s, top, axis=1).min(axis=1)  # k-th largest score per user
    ties = np.flatnonzero(np.count_nonzero(s >= kth[:, None], axis=1) > k)
    if ties.size:  # more than k items reach the k-th value: keep the lowest indices among them
        sub, t = s[ties], kth[ties, None]
        above, equal = sub > t, sub == t
        need = k - np.count_nonzero(above, axis=1)[:, None]
        keep = above | (equal & (np.cumsum(equal, axis=1, dtype=np.int32) <= need))
        top[ties] = np.nonzero(keep)[1].reshape(ties.size, k)
    vals = np.take_along_axis(s, top, axis=1)
    order = np.lexsort((top, -vals), axis=1)
    return np.take_along_axis(top, order, axis=1)


def hit_matrix(topk: np.ndarray, truth: Any) -> np.ndarray:
    """hit[u, j] = topk[u, j] is one of user u's test items; [U, K] bool.

    truth: per-user test items with U rows (anything ``as_csr`` reads). Vectorised membership:
    (user, item) pairs become int64 keys, looked up in the sorted truth keys.
    """
    topk = np.asarray(topk, dtype=np.int64)
    t = as_csr(truth, topk.shape[0])
    if t.indices.size == 0 or topk.size == 0:
        return np.zeros(topk.shape, dtype=bool)
    width = int(max(topk.max(), t.indices.max())) + 1
    keys = t.row_ids() * width + t.indices  # sorted: rows ascending, items ascending within a row
    query = np.arange(topk.shape[0], dtype=np.int64)[:, None] * width + topk
    pos = np.minimum(np.searchsorted(keys, query), keys.size - 1)
    return keys[pos] == query


def per_user_ranking_metrics(
    topk: np.ndarray, truth: Any, ks: Sequence[int] = DEFAULT_KS
) -> dict[str, np.ndarray]:
    """Per-user recall/mrr/ndcg/hit/precision@k for every k in ks; each [U] float64.

    topk: [U, K] item indices, best first (K >= max(ks)); truth: per-user test items, U rows.
    Users without test items get NaN in every metric (drop them with ``np.isnan`` for paired
    tests; ``np.nanmean`` gives ``ranking_metrics``). Also returns ``n_test`` [U] (as float).
    """
    topk = np.asarray(topk, dtype=np.int64)
    if topk.ndim != 2:
        raise ValueError(f"topk must be [U, K]; got shape {topk.shape}")
    ks = _check_ks(ks, topk.shape[1])
    t = as_csr(truth, topk.shape[0])
    hits = hit_matrix(topk, t)
    n_test = t.lengths()
    evaluated = n_test > 0
    discount = 1.0 / np.log2(np.arange(2, topk.shape[1] + 2))
    ideal = np.cumsum(discount)  # ideal[m - 1] = IDCG with m relevant items at the top
    out: dict[str, np.ndarray] = {}
    for k in ks:
        h = hits[:, :k]
        n_hit = h.sum(axis=1)
        first = np.argmax(h, axis=1)  # first hit position (0 when there is none; masked below)
        dcg = h.astype(np.float64) @ discount[:k]
        idcg = ideal[np.clip(np.minimum(k, n_test), 1, None) - 1]
        values = {
            "recall": n_hit / np.maximum(n_test, 1),
            "mrr": np.where(n_hit > 0, 1.0 / (first + 1), 0.0),
            "ndcg": dcg / idcg,
            "hit": (n_hit > 0).astype(np.float64),
            "precision": n_hit / k,
        }
        for name in RANKING_METRICS:
            out[f"{name}@{k}"] = np.where(evaluated, values[name], np.nan)
    out = {key: out[key] for key in (f"{m}@{k}" for m in RANKING_METRICS for k in ks)}  # metric-major
    out["n_test"] = n_test.astype(np.float64)
    return out


def ranking_metrics(topk: np.ndarray, truth: Any, ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """recall/mrr/ndcg/hit/precision@k averaged over users with at least one test item.

    topk: [U, K] item indices, best first; truth: per-user test items with U rows (CSR
    ``(indptr, indices)``, scipy sparse, list of arrays). Keys ``"recall@10", "recall@20", ...,
    "mrr@10", ...``: metric-major, in the order of ``RANKING_METRICS`` and ks. Raises ValueError when no user has a test item.
    """
    per_user = per_user_ranking_metrics(topk, truth, ks)
    evaluated = per_user.pop("n_test") > 0
    if not evaluated.any():
        raise ValueError("no user has a test item: ranking metrics are undefined")
    return {name: float(v[evaluated].mean()) for name, v in per_user.items()}


def full_sort_topk(
    score_fn: ScoreFn | np.ndarray,
    users: Any,
    n_items: int,
    exclude: Any,
    k: int,
    batch_users: int = 1024,
) -> np.ndarray:
    """Top-k items of every user in ``users``, scoring ``batch_users`` users at a time; [B, k].

    score_fn(user_batch [b] int64) -> [b, n_items] scores (numpy, or a torch tensor on any
    device), or one [n_items] array of scores every user shares (popularity): the same lists,
    read off one sorted order without scoring users x items. exclude: items to mask, indexed by
    *user index* (rows >= max(users) + 1) or None. Peak memory is about batch_users x n_items
    scores plus the [B, k] result.
    """
    users = np.asarray(users, dtype=np.int64).ravel()
    mask = None if exclude is None else as_csr(exclude)
    if mask is not None and users.size and users.max() >= mask.n_rows:
        raise ValueError(f"exclude has {mask.n_rows} rows but users go up to {users.max()}")
    if batch_users < 1:
        raise ValueError(f"batch_users must be >= 1; got {batch_users}")
    if isinstance(score_fn, np.ndarray):
        if score_fn.shape != (n_items,):
            raise ValueError(f"shared scores must have shape ({n_items},); got {score_fn.shape}")
        return _shared_topk(score_fn, users, mask, k, batch_users)
    out = np.empty((users.size, k), dtype=np.int64)
    for start in range(0, users.size, batch_users):
        batch = users[start : start + batch_users]
        scores = _to_numpy(score_fn(batch))
        if scores.shape != (batch.size, n_items):
            raise ValueError(
                f"score_fn returned shape {scores.shape} for {batch.size} users; expected ({batch.size}, {n_items})"
            )
        out[start : start + batch.size] = topk_from_scores(
            scores, k, None if mask is None else csr_rows(mask, batch)
        )
    return out


def _shared_topk(scores: np.ndarray, users: np.ndarray, mask: Any, k: int, batch_users: int) -> np.ndarray:
    """``topk_from_scores`` of rows that all equal ``scores`` [I]: one order (best first, ties to
    the lower index, NaN as -inf); a user's list is the first k items of it they do not exclude,
    so only the head of the order that their exclusions can reach is looked at."""
    n_items = scores.size
    if not 1 <= k <= n_items:
        raise ValueError(f"k must be in [1, {n_items}] (the number of items); got {k}")
    s = np.where(np.isnan(scores), -np.inf, scores)
    order = np.lexsort((np.arange(n_items), -s))
    n_good = int(np.count_nonzero(s > -np.inf))  # the head of the order above the masked items' -inf
    if mask is None:
        return np.tile(order[:k], (users.size, 1))
    rank = np.empty(n_items, dtype=np.int64)
    rank[order] = np.arange(n_items)
    out = np.empty((users.size, k), dtype=np.int64)
    for start in range(0, users.size, batch_users):
        m = csr_rows(mask, users[start : start + batch_users])
        head = min(n_items, k + int(m.lengths().max(initial=0)))  # holds k items no row masks
        masked = np.zeros((m.n_rows, head), dtype=bool)
        r = rank[m.indices]
        keep = r < head
        masked[m.row_ids()[keep], r[keep]] = True
        out[start : start + m.n_rows] = order[np.argsort(masked, axis=1, kind="stable")[:, :k]]
        lim = min(head, n_good)
        short = np.flatnonzero(lim - masked[:, :lim].sum(axis=1) < k)  # < k unmasked items above -inf
        for row in short:  # the rest tie at -inf with the masked items: lowest index first, as the full sort
            good = order[:lim][~masked[row, :lim]]
            out[start + row] = np.concatenate([good, np.setdiff1d(np.arange(n_items), good)])[:k]
    return out


def evaluate_full_sort(
    score_fn: ScoreFn,
    users: Any,
    n_items: int,
    exclude: Any,
    truth: Any,
    ks: Sequence[int] = DEFAULT_KS,
    batch_users: int = 1024,
) -> dict[str, float]:
    """Full-sort ranking metrics of a scoring model, in user batches (bounded memory).

    users: [B] user indices to evaluate, or None for every user with a test item. exclude
    (train + valid items) and truth (test items) are indexed by user index. Same result as
    ``ranking_metrics(topk_from_scores(all_scores, max(ks), exclude), truth, ks)``.
    """
    t = as_csr(truth)
    users = np.flatnonzero(t.lengths() > 0) if users is None else np.asarray(users, dtype=np.int64).ravel()
    if users.size and users.max() >= t.n_rows:
        raise ValueError(f"truth has {t.n_rows} rows but users go up to {users.max()}")
    k_max = max(_check_ks(ks, n_items))
    topk = full_sort_topk(score_fn, users, n_items, exclude, k_max, batch_users)
    return ranking_metrics(topk, csr_rows(t, users), ks)


def _check_ks(ks: Sequence[int], limit: int) -> list[int]:
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1 or max(ks) > limit:
        raise ValueError(f"every k must be in [1, {limit}]; got {ks}")
    return ks


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, read without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x)
