"""Evaluating a reward model (and the MostPop baseline) in the shared metrics harness.

Sections of the result (they become ``metrics.json`` at publish):

- ``valid``, ``test``: full-sort ranking metrics (``data_pipelines.metrics``, RecBole
  definitions) of the click score over every item, train items masked (and valid
  items at test); ``test`` adds the popularity-bias diagnostics of the top-K lists.
- ``diagnostics``: mean per-user Spearman of the interest (and click) score with the
  item's train popularity over random warm items: how much of "taste" is popularity.
- ``synthetic`` (datasets written by ``data_pipelines.synth``): ``interest_spearman``
  and ``conformity_spearman`` against the truth on ``spearman_items`` random warm
  items per warm user; ranking metrics on ``uniform_test/`` (each user's uniformly
  exposed items ranked by the click and by the interest score).
- ``report_half`` (a uniform-exposure set: synthetic ``uniform_test``, Coat's random test): the
  click ranking of the *report* half of its users (``reward_models.selection``): the half model
  selection never reads; MostPop's beside it in ``baselines``.
- ``baselines.mostpop``: the same harness with score = train popularity.

Full-sort sections score every item (``Scorer``); the uniform-exposure sections rank only each
user's exposed items, so they score only those pairs (``PairScorer``): the cost follows the
uniform set's size, not users x items.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import torch

from data_pipelines.dataset import Dataset
from data_pipelines.metrics import (
    Csr,
    bias_metrics,
    csr_from_pairs,
    csr_rows,
    full_sort_topk,
    mean_user_spearman,
    per_user_ranking_metrics,
    ranking_metrics,
    sample_items_per_user,
    synthetic_spearman,
)
from reward_models.data import RewardData, index_pairs

if TYPE_CHECKING:
    from reward_models.selection import UniformHalf

Scorer = Callable[[np.ndarray], np.ndarray]  # user indices [b] -> scores [b, n_items]
PairScorer = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (user [P], item [P]) -> scores [P]
PAIRS_PER_CHUNK = 1 << 16  # pairs scored at once by ``Vectors.pair_scorer`` (a [chunk, d] gather)
UNIFORM_KS = (5, 10)  # 5: Coat's protocol (its random test is small); 10: the synthetic targets
UNIFORM_METRICS = tuple(f"{m}@{k}" for k in UNIFORM_KS for m in ("ndcg", "recall", "hit", "mrr"))


@dataclass
class Vectors:
    """Scored vectors in one dataset's index space: branch -> user [n_users, d], item [n_items, d]."""

    user: dict[str, torch.Tensor]
    item: dict[str, torch.Tensor]

    @classmethod
    def from_tables(cls, tables: Mapping[str, torch.Tensor]) -> Vectors:
        """From ``CausalEmbeddings.export`` names (``user_interest``, ``item_conformity``, ...)."""
        user = {k[5:]: v.float() for k, v in tables.items() if k.startswith("user_") and v.ndim == 2}
        item = {k[5:]: v.float() for k, v in tables.items() if k.startswith("item_") and v.ndim == 2}
        return cls(user, item)

    @property
    def disentangled(self) -> bool:
        return "conformity" in self.user

    def _names(self, branch: str) -> list[str]:
        return list(self.user) if branch == "click" else [branch]

    def pair_scores(self, users: np.ndarray, items: np.ndarray, branch: str) -> np.ndarray:
        """Scores of users [U] x their own items [U, n] -> [U, n] (branch: interest, conformity, click)."""
        flat = self.pair_scorer(branch)(np.repeat(users, items.shape[1]), items.ravel())
        return flat.reshape(items.shape)

    def pair_scorer(self, branch: str = "click") -> PairScorer:
        """Scores of (user [P], item [P]) pairs, ``PAIRS_PER_CHUNK`` at a time (bounded temporaries)."""
        uu = torch.cat([self.user[b] for b in self._names(branch)], dim=1)
        ii = torch.cat([self.item[b] for b in self._names(branch)], dim=1)

        def score(users: np.ndarray, items: np.ndarray) -> np.ndarray:
            u = torch.from_numpy(np.asarray(users, dtype=np.int64))
            i = torch.from_numpy(np.asarray(items, dtype=np.int64))
            out = torch.empty(u.numel(), dtype=uu.dtype)
            for s in range(0, u.numel(), PAIRS_PER_CHUNK):
                c = slice(s, s + PAIRS_PER_CHUNK)
                out[c] = (uu[u[c]] * ii[i[c]]).sum(1)
            return out.numpy()

        return score

    def scorer(self, branch: str = "click") -> Scorer:
        uu = torch.cat([self.user[b] for b in self._names(branch)], dim=1)
        ii = torch.cat([self.item[b] for b in self._names(branch)], dim=1)

        def score(users: np.ndarray) -> np.ndarray:
            return (uu[torch.from_numpy(np.asarray(users, dtype=np.int64))] @ ii.T).numpy()

        return score


def mostpop_scorer(popularity: np.ndarray) -> Scorer:
    """Every user gets the items' train popularity (ties: lower index first)."""
    pop = np.asarray(popularity, dtype=np.float32)
    return lambda users: np.broadcast_to(pop, (len(users), pop.size))


def mostpop_pairs(popularity: np.ndarray) -> PairScorer:
    """``mostpop_scorer`` for pairs: an item's train popularity whoever the user."""
    pop = np.asarray(popularity, dtype=np.float32)
    return lambda users, items: pop[items]


def union(a: Csr, b: Csr) -> Csr:
    rows = np.concatenate([a.row_ids(), b.row_ids()])
    return csr_from_pairs(rows, np.concatenate([a.indices, b.indices]), a.n_rows)


def ranking(
    scorer: Scorer | np.ndarray,
    data: RewardData,
    part: str,
    ks: Sequence[int],
    batch_users: int = 1024,
    bias: bool = False,
) -> dict[str, float]:
    """Full-sort metrics on ``part`` (valid: train masked; test: train + valid masked); ``scorer``
    may be one [n_items] array every user shares (``full_sort_topk``)."""
    truth = data.valid if part == "valid" else data.test
    exclude = data.train if part == "valid" else union(data.train, data.valid)
    users = np.flatnonzero(truth.lengths() > 0)
    if users.size == 0:
        return {}
    ks = [k for k in ks if k <= data.n_items]
    topk = full_sort_topk(scorer, users, data.n_items, exclude, max(ks), batch_users)
    out = ranking_metrics(topk, csr_rows(truth, users), ks)
    out["n_users"] = float(users.size)
    if bias:
        out |= bias_metrics(topk, data.popularity, ks)
    return out


def _warm_sample(data: RewardData, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(warm users [U], n sampled warm items per user [U, n])."""
    users = np.flatnonzero(data.seen_users())
    warm_items = np.flatnonzero(data.seen_items())
    n = min(n, warm_items.size)
    if users.size == 0 or n < 2:
        return users[:0], np.empty((0, 0), dtype=np.int64)
    return users, warm_items[sample_items_per_user(users.size, warm_items.size, n, seed)]


def diagnostics(vec: Vectors, data: RewardData, n: int = 200, seed: int = 0) -> dict[str, float]:
    """Mean per-user Spearman of the interest / click score with log train popularity."""
    users, items = _warm_sample(data, n, seed)
    if users.size == 0:
        return {}
    logpop = np.log1p(data.popularity.astype(np.float64))[items]
    return {
        f"{b}_popularity_spearman": mean_user_spearman(vec.pair_scores(users, items, b), logpop)[0]
        for b in ("interest", "click")
    }


@dataclass
class TruthSample:
    """The Spearman sample of a synthetic dataset, in ``data``'s index space.

    ``users`` [U] warm users, ``items`` [U, n] random warm items per user, ``interest`` and
    ``conformity`` [U, n] their true s(u, i) and c_u * pop_i; ``user_vectors`` [n_users, d]
    and ``item_vectors`` [n_items, d] the true vectors of every dataset row, ``pop`` [n_items]
    the generator's final pop_i (log1p of exposure in units of its mean).
    """

    users: np.ndarray
    items: np.ndarray
    interest: np.ndarray
    conformity: np.ndarray
    user_vectors: np.ndarray
    item_vectors: np.ndarray
    pop: np.ndarray


def truth_sample(data: RewardData, n: int = 200, seed: int = 0) -> TruthSample | None:
    """The truth of ``_warm_sample(data, n, seed)`` from ``DIR/truth``; None without truth or warm users."""
    root = Path(data.root)
    if not (root / "truth" / "meta.json").is_file():
        return None
    from data_pipelines.synth import Truth

    truth = Truth(root)
    users, items = _warm_sample(data, n, seed)
    if users.size == 0:
        return None
    uid, iid = data.users["id"].to_numpy(), data.items["id"].to_numpy()
    tu_at, ti_at = truth.user_index(uid), truth.item_index(iid)
    tu = truth.user_vectors[tu_at].astype(np.float64)  # [n_users, d] in dataset order
    ti = truth.item_vectors[ti_at].astype(np.float64)  # [n_items, d]
    n = items.shape[1]
    true_int = np.empty(items.shape, dtype=np.float64)
    step = max(1, PAIRS_PER_CHUNK // n)
    for s in range(0, users.size, step):  # a [chunk, n, d] gather: the whole one was 12.9 GiB at 540k users
        c = slice(s, s + step)
        pair_u, pair_i = np.repeat(tu_at[users[c]], n), ti_at[items[c]].ravel()
        true_int[c] = truth.interest_at(pair_u, pair_i).reshape(-1, n)
    expo_df = pl.read_parquet(truth.dir / "items.parquet", columns=["item_id", "exposure"])
    expo = expo_df["exposure"].to_numpy().astype(np.float64)[ti_at]
    pop = np.log1p(expo / max(expo.mean(), 1e-12))  # pop_i of the click logit (docs/synthetic.md)
    true_con = truth.conformity(uid[users])[:, None] * pop[items]
    return TruthSample(users, items, true_int, true_con, tu, ti, pop)


def truth_spearman(vec: Vectors, data: RewardData, n: int = 200, seed: int = 0) -> dict[str, float]:
    """``interest_spearman`` (and ``conformity_spearman``) against ``DIR/truth``; {} without truth."""
    t = truth_sample(data, n, seed)
    if t is None:
        return {}
    learned_con = vec.pair_scores(t.users, t.items, "conformity") if vec.disentangled else None
    true_con = t.conformity if vec.disentangled else None
    res = synthetic_spearman(vec.pair_scores(t.users, t.items, "interest"), t.interest, learned_con, true_con)
    return {k.removeprefix("synthetic."): v for k, v in res.items()}


def uniform_sets(data: RewardData, uniform: Dataset) -> tuple[Csr, Csr]:
    """(positives, exposed items) of a uniform-exposure dataset in ``data``'s index space, Csr each."""
    rows = uniform.interactions().collect()
    shown = index_pairs(rows.filter(pl.col("event") == "impression"), data.users, data.items)
    pos = index_pairs(rows.filter(data.rule.is_positive()), data.users, data.items)
    cand = csr_from_pairs(shown["u"].to_numpy(), shown["i"].to_numpy(), data.n_users)
    return csr_from_pairs(pos["u"].to_numpy(), pos["i"].to_numpy(), data.n_users), cand


def candidates_topk(
    pair_scorer: PairScorer, candidates: Csr, users: np.ndarray, k: int, pad: int
) -> np.ndarray:
    """Top-k [U, k] of each user's ``candidates`` by ``pair_scorer``, best first (ties: the lower
    item index, as ``topk_from_scores``; NaN ranks last), scoring only those pairs; rows with
    fewer than k candidates are filled with ``pad`` (an index that is no item, so never a positive)."""
    c = csr_rows(candidates, users)
    row = c.row_ids()
    s = np.asarray(pair_scorer(users[row], c.indices), dtype=np.float64)
    order = np.lexsort((-s, row))  # by row, then best first; stable, so ties keep the item order
    pos = np.arange(order.size) - c.indptr[row[order]]
    keep = pos < k
    out = np.full((users.size, k), pad, dtype=np.int64)
    out[row[order][keep], pos[keep]] = c.indices[order][keep]
    return out


def users_ranking(
    pair_scorer: PairScorer,
    data: RewardData,
    truth: Csr,
    candidates: Csr,
    users: np.ndarray,
    prefix: str,
) -> dict[str, float]:
    """Metrics@5 and @10 of ``users`` [U]: only their ``candidates`` (exposed items) compete, the
    positives among them are ``truth`` (Csr with n_users rows each)."""
    if users.size == 0:
        return {}
    topk = candidates_topk(pair_scorer, candidates, users, max(UNIFORM_KS), data.n_items)
    per_user = per_user_ranking_metrics(topk, csr_rows(truth, users), ks=UNIFORM_KS)
    out = {f"{prefix}.{m}": float(np.nanmean(per_user[m])) for m in UNIFORM_METRICS}
    out[f"{prefix}.n_users"] = float(users.size)
    return out


def uniform_metrics(
    pair_scorer: PairScorer, data: RewardData, uniform: Dataset, prefix: str = "uniform"
) -> dict[str, float]:
    """Each warm user's uniformly exposed items ranked by ``pair_scorer``; metrics@10 against the positives."""
    truth, cand = uniform_sets(data, uniform)
    users = np.flatnonzero((truth.lengths() > 0) & data.seen_users())
    return users_ranking(pair_scorer, data, truth, cand, users, prefix)


def synthetic_metrics(
    vec: Vectors | None, data: RewardData, pair_scorer: PairScorer, n: int = 200, seed: int = 0
) -> dict[str, float]:
    """Truth Spearman (when ``vec`` is given) and uniform-exposure ranking; {} for other data."""
    out = truth_spearman(vec, data, n, seed) if vec is not None else {}
    uniform = Path(data.root) / "uniform_test"
    if (uniform / "manifest.json").is_file():
        ds = Dataset(uniform)
        out |= uniform_metrics(pair_scorer, data, ds, prefix="uniform")
        if vec is not None and vec.disentangled:
            out |= uniform_metrics(vec.pair_scorer("interest"), data, ds, prefix="uniform_interest")
    return out


def evaluate(
    tables: Mapping[str, torch.Tensor] | Vectors,
    data: RewardData,
    ks: Sequence[int] = (10, 20, 50),
    *,
    batch_users: int = 1024,
    spearman_items: int = 200,
    seed: int = 0,
    baselines: bool = True,
    half: UniformHalf | None = None,
) -> dict[str, Any]:
    """Every section of the module docstring for a model's vectors on ``data``'s split (``half``:
    the uniform set's halves, for ``report_half``)."""
    vec = tables if isinstance(tables, Vectors) else Vectors.from_tables(tables)
    click = vec.scorer("click")
    out: dict[str, Any] = {
        "valid": ranking(click, data, "valid", ks, batch_users),
        "test": ranking(click, data, "test", ks, batch_users, bias=True),
        "diagnostics": diagnostics(vec, data, spearman_items, seed),
    }
    click_pairs = vec.pair_scorer("click")
    syn = synthetic_metrics(vec, data, click_pairs, spearman_items, seed)
    if syn:
        out["synthetic"] = syn
    if half is not None:
        out["report_half"] = report_half_metrics(click_pairs, data, half)
    if baselines:
        pop = np.asarray(data.popularity, dtype=np.float32)  # shared: ranked once, not per user
        base: dict[str, Any] = {
            "valid": ranking(pop, data, "valid", ks, batch_users),
            "test": ranking(pop, data, "test", ks, batch_users, bias=True),
        }
        pop_pairs = mostpop_pairs(data.popularity)
        syn_pop = synthetic_metrics(None, data, pop_pairs, spearman_items, seed)
        if syn_pop:
            base["synthetic"] = syn_pop
        if half is not None:
            base["report_half"] = report_half_metrics(pop_pairs, data, half)
        out["baselines"] = {"mostpop": base}
    return out


def report_half_metrics(pair_scorer: PairScorer, data: RewardData, half: UniformHalf) -> dict[str, Any]:
    """``pair_scorer``'s metrics@10 on the report half of ``half`` (its source named)."""
    ranked = users_ranking(pair_scorer, data, half.truth, half.candidates, half.report_users, "report")
    return {"source": half.source} | {k.removeprefix("report."): v for k, v in ranked.items()}
