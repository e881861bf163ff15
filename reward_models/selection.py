"""What model selection (early stopping, best-evaluation choice) watches, and the uniform half.

``train.select: auto`` picks, in order:

1. ``valid/exposure_logloss`` (lower is better) where the split has held-out impressions
   with valid positives of the same users (``reward_models.exposure``): exposure is equal on
   both sides of every comparison, so popularity cannot win it by being shown more;
2. ``valid/uniform_ndcg@10`` on the *selection half* of a uniform (random-exposure) set:
   synthetic ``DIR/uniform_test`` or Coat's ``native`` test (each user's uniformly exposed
   items, its ``uniform_random`` ratings on Coat, ranked against the positives among them). Users are cut 50/50 by a stable
   hash of their id; targets are reported on the other half only (``report_half`` in
   ``metrics.json``), so the reported figure never saw selection;
3. ``valid/ndcg@10`` (``train.select: ndcg`` always uses it: today's behaviour).
``train.select: uniform`` puts 2 first, then the same order. On a split whose valid positives are
drawn against popularity (``intervened``), the held-out impressions and the valid positives
differ in popularity, so 1 punishes the conformity the click score rightly holds; on the
synthetic world it moved by less than its noise between the steps that ranked the truth best
and worst (benchmarks/README.md, "Scalar conformity, pointwise exposure loss, uniform-half selection").

Valid NDCG on a popularity-biased split is won by popularity-like models, hence the order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl

from data_pipelines.dataset import Dataset
from data_pipelines.metrics import Csr, csr_from_pairs
from data_pipelines.splits.hashing import id_hash64, uniform
from data_pipelines.splits.prepare import COAT_RANDOM
from reward_models.data import RewardData, index_pairs
from reward_models.evaluate import uniform_sets

HALF_SEED = 0  # fixed: the halves never move between runs, seeds or versions


@dataclass(frozen=True)
class Selection:
    """``monitor``: the logged metric; ``mode``: min or max; ``target``: its name in ``metrics.json``."""

    monitor: str
    mode: Literal["min", "max"]
    target: str


NDCG = Selection("valid/ndcg@10", "max", "valid_ndcg@10")
EXPOSURE = Selection("valid/exposure_logloss", "min", "heldout_impression_logloss")
UNIFORM = Selection("valid/uniform_ndcg@10", "max", "uniform_half_ndcg@10")


@dataclass
class UniformHalf:
    """A uniform-exposure set in ``data``'s index space, users cut in two.

    ``truth``: its positives, ``candidates``: its exposed items, Csr with n_users rows; ``select_users``, ``report_users``:
    [S], [R] user indices with a positive, disjoint; ``source``: ``uniform_test`` or ``native_test``.
    """

    truth: Csr
    candidates: Csr
    select_users: np.ndarray
    report_users: np.ndarray
    source: str


def report_side(user_ids: list[str]) -> np.ndarray:
    """[n] bool: the user's targets are reported (True) or used for selection (False); 50/50 by a
    stable hash of the external id."""
    if not user_ids:
        return np.zeros(0, dtype=bool)
    h = id_hash64(pl.Series(user_ids, dtype=pl.String), HALF_SEED).to_numpy()
    return uniform(h, "uniform-half") < 0.5


def _cut(truth: Csr, candidates: Csr, data: RewardData, source: str) -> UniformHalf | None:
    users = np.flatnonzero((truth.lengths() > 0) & data.seen_users())
    if users.size == 0:
        return None
    ids = data.user_ids()
    report = report_side([ids[u] for u in users.tolist()])
    return UniformHalf(truth, candidates, users[~report], users[report], source)


def load_uniform_half(data: RewardData) -> UniformHalf | None:
    """Synthetic ``uniform_test`` or Coat ``native``'s random test, halved; None when there is neither."""
    root = Path(data.root) / "uniform_test"
    if (root / "manifest.json").is_file():
        truth, cand = uniform_sets(data, Dataset(root))
        return _cut(truth, cand, data, "uniform_test")
    if data.split == "native" and data.meta.get("source") == "coat":
        # Coat's protocol: each user's uniformly random rated items compete (16 per user)
        rows = Dataset(data.root).interactions().filter(pl.col("logging_policy") == COAT_RANDOM)
        shown = index_pairs(rows.select("user_id", "item_id").collect(), data.users, data.items)
        cand = csr_from_pairs(shown["u"].to_numpy(), shown["i"].to_numpy(), data.n_users)
        return _cut(data.test, cand, data, "native_test")
    return None


def choose(select: str, data: RewardData, half: UniformHalf | None) -> Selection:
    """The selection target (module docstring) for ``train.select`` on ``data``."""
    if select == "ndcg":
        return NDCG
    if select == "uniform" and half is not None and half.select_users.size:
        return UNIFORM
    ex = data.exposure
    if ex is not None and ex.valid_user.size and bool((data.valid.lengths()[ex.valid_user] > 0).any()):
        return EXPOSURE
    if half is not None and half.select_users.size:
        return UNIFORM
    return NDCG
