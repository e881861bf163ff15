"""Exposure-aware training: impressions (shown, not a positive) as negatives, and their held-out log-loss.

An impression pair (u, j) is a negative only when no positive of u on j is in any part of the
split (train, valid or test): a train pair with a positive is never a negative, and a held-out
positive is never trained against. The remaining pairs are cut by a stable hash of
(user, item, split seed): ``valid_share`` of them are held out (the valid log-loss), the rest
are training negatives. Pairs whose user has no train positive are dropped from training (a
triple needs a positive of the same user).

Training (``ImpressionTriples``): each epoch, every training impression (u, j) becomes one
triple (u, i, j) with i a uniform draw among u's train positives, weighted ``weight``; the
triples go through the same DICE loss as the sampled ones (``reward_models.losses``): the click
BPR, and the cause-specific terms. ``exposure.interest``: ``popularity`` applies DICE's rule
(the popularity comparison of i and j decides the interest and conformity terms);
``exposed`` reads every impression triple as a choice at equal exposure: the interest term
applies whatever the popularity order and the conformity term does not (the conformity
branch keeps learning popularity from the sampled triples). Both items were shown, so the
click term compares taste (and conformity) at equal exposure, which uniform negatives cannot.

Held-out target (``exposure_logloss``): the mean over held-out impressions (u, j) and the
valid positives i of u of ``-log sigma(click(u, i) - click(u, j))``: the pairwise log-loss of
telling what a user chose from what they were shown and passed over (lower is better).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import torch
from torch import Tensor

from data_pipelines.dataset import Dataset
from data_pipelines.metrics import Csr, csr_rows
from data_pipelines.splits.hashing import mix64, uniform
from reward_models.data import RewardData, index_pairs


def pair_uniform(user: np.ndarray, item: np.ndarray, n_items: int, seed: int) -> np.ndarray:
    """A stable uniform (0, 1) per (user, item) index pair and seed: [n] float64."""
    key = user.astype(np.uint64) * np.uint64(n_items) + item.astype(np.uint64)
    return uniform(key ^ mix64(np.full(key.shape, seed, dtype=np.uint64)), "exposure/valid")


@dataclass
class Exposure:
    """Impression negatives of a split, as index pairs: ``train_*`` [M] and ``valid_*`` [V] int64."""

    train_user: np.ndarray
    train_item: np.ndarray
    valid_user: np.ndarray
    valid_item: np.ndarray

    @property
    def n_train(self) -> int:
        return int(self.train_user.size)

    def summary(self) -> dict[str, int]:
        return {"train_impressions": self.n_train, "valid_impressions": int(self.valid_user.size)}


def impression_pairs(ds: Dataset, data: RewardData) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (user, item) index pairs of the dataset's impressions, [P] int64 each, sorted.

    Read one partition at a time, so the text ids of one partition are in memory at once
    (most rows of an exposure log are impressions)."""
    keys = [np.zeros(0, dtype=np.int64)]
    for path in ds.partition_paths():
        rows = (
            pl.scan_parquet(path)
            .filter(pl.col("event") == "impression")
            .select("user_id", "item_id")
            .unique()
            .collect()
        )
        idx = index_pairs(rows, data.users, data.items)
        keys.append(np.unique(idx["u"].to_numpy().astype(np.int64) * data.n_items + idx["i"].to_numpy()))
    key = np.unique(np.concatenate(keys))
    return key // data.n_items, key % data.n_items


def _has_pair(csr: Csr, user: np.ndarray, item: np.ndarray, n_items: int) -> np.ndarray:
    """[P] bool: (user, item) is an entry of ``csr``."""
    key = np.sort(csr.row_ids().astype(np.int64) * n_items + csr.indices)
    q = user * n_items + item
    at = np.searchsorted(key, q).clip(max=max(key.size - 1, 0))
    return (key[at] == q) if key.size else np.zeros(q.shape, dtype=bool)


def load_exposure(ds: Dataset, data: RewardData, valid_share: float) -> Exposure | None:
    """The split's impression negatives (module docstring); None when the dataset has none."""
    u, i = impression_pairs(ds, data)
    if u.size == 0:
        return None
    positive = np.zeros(u.size, dtype=bool)
    for part in (data.train, data.valid, data.test):
        positive |= _has_pair(part, u, i, data.n_items)
    u, i = u[~positive], i[~positive]
    held = pair_uniform(u, i, data.n_items, data.seed) < valid_share
    trainable = ~held & data.seen_users()[u]
    return Exposure(u[trainable], i[trainable], u[held], i[held])


class ImpressionTriples:
    """Per-epoch triples (u, i, j) of the training impressions (module docstring), in ``n_batches`` slices.

    All randomness comes from the generator passed to ``epoch`` (the sampler's: a stream's
    exact resume replays it)."""

    def __init__(
        self,
        exposure: Exposure,
        train: Csr,
        popularity: Tensor,
        weight: float,
        exposed: bool = False,
        pointwise: bool = False,
    ) -> None:
        """``exposed``: flag the triples so the loss reads them as equal-exposure choices
        (``dice_loss(exposed=...)``: interest term always, no conformity term); ``pointwise``:
        flag them ``impression`` (their negative is a shown-and-passed pair of the pointwise
        log-loss, ``reward_models.losses.exposure_pointwise``)."""
        self.user = torch.from_numpy(exposure.train_user)
        self.neg = torch.from_numpy(exposure.train_item)
        self.indptr = torch.from_numpy(train.indptr.astype(np.int64))
        self.indices = torch.from_numpy(train.indices.astype(np.int64))
        self.pop = popularity.to(torch.float64)
        self.weight, self.exposed, self.pointwise = weight, exposed, pointwise

    def __len__(self) -> int:
        return int(self.user.shape[0])

    def epoch(self, n_batches: int, generator: torch.Generator) -> list[dict[str, Tensor]]:
        """``n_batches`` near-equal slices of a fresh permutation of the impressions, as triple fields:
        user, pos, neg [b] int64; neg_more_popular, fallback [b] bool; pos_weight, int_weight,
        con_weight, click_weight [b] float32; exposed, impression [b] bool (all True) when asked for."""
        n = len(self)
        perm = torch.randperm(n, generator=generator)
        u, j = self.user[perm], self.neg[perm]
        start = self.indptr.index_select(0, u)
        deg = self.indptr.index_select(0, u + 1) - start
        draw = torch.randint(0, 2**62, (n,), generator=generator)
        i = self.indices.index_select(0, start + draw % deg)
        more = self.pop.index_select(0, j) > self.pop.index_select(0, i)
        w = torch.full((n,), self.weight, dtype=torch.float32)
        ones = torch.ones(n, dtype=torch.float32)
        fields = {
            "user": u,
            "pos": i,
            "neg": j,
            "neg_more_popular": more,
            "fallback": torch.zeros(n, dtype=torch.bool),
            "pos_weight": w,
            "int_weight": ones,
            "con_weight": ones,
            "click_weight": ones,
        }
        if self.exposed:
            fields["exposed"] = torch.ones(n, dtype=torch.bool)
        if self.pointwise:
            fields["impression"] = torch.ones(n, dtype=torch.bool)
        cuts = [(n * b) // n_batches for b in range(n_batches + 1)]
        return [{k: v[cuts[b] : cuts[b + 1]] for k, v in fields.items()} for b in range(n_batches)]


def exposure_logloss(
    user_click: Tensor, item_click: Tensor, valid: Csr, exposure: Exposure, users: np.ndarray | None = None
) -> tuple[float, int]:
    """Pairwise held-out log-loss (module docstring) and the number of (positive, impression) pairs.

    user_click [n_users, D], item_click [n_items, D]: the click vectors (score = dot product);
    users: restrict to these users (None: all). Returns (nan, 0) when no user has both."""
    hu, hi = exposure.valid_user, exposure.valid_item
    if users is not None:
        keep = np.isin(hu, users)
        hu, hi = hu[keep], hi[keep]
    rows = csr_rows(valid, hu)  # the valid positives of each held-out impression's user
    n = rows.lengths()
    if hu.size == 0 or int(n.sum()) == 0:
        return float("nan"), 0
    imp_user = np.repeat(hu, n)
    imp_item = np.repeat(hi, n)
    u = torch.from_numpy(imp_user)
    uv = user_click.index_select(0, u)
    pos = (uv * item_click.index_select(0, torch.from_numpy(rows.indices.astype(np.int64)))).sum(1)
    neg = (uv * item_click.index_select(0, torch.from_numpy(imp_item))).sum(1)
    loss = torch.nn.functional.softplus(neg - pos)  # -log sigma(pos - neg)
    return float(loss.double().mean()), int(loss.shape[0])
