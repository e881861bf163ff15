"""Warm start of a reward model from a published version (``parpo retrain``, docs/retraining.md).

The new dataset's id maps extend the base version's (same id, same index; new ids appended),
so a returning user or item keeps its row. The initial tables of the new model are the base's
*scored* vectors, read through its readout (``RewardModel``), by id:

    returning user / item (warm in the base)   its base vector, copied
    user new to the base                       the base's cold path: stage 1's profile map on the
                                               user's train events (fallbacks without stage 1)
    item in the base's map, never trained      the base's attribute map (stage 1)
    item new to the base                       the base's attribute map on the new dataset's item
                                               table (the base's vocabulary); the mean warm item
                                               without stage 1

The vectors go into the id rows; feature rows (hybrid embeddings) start at zero as in a fresh
model, so the initial MF model scores returning pairs exactly as the base did (LightGCN: the
propagated vectors seed the raw rows, an approximation). Training then runs as usual, on a
window of the train split plus a replay share of older rows (``TrainWindow``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import polars as pl
import torch

from data_pipelines.dataset import Dataset
from data_pipelines.idmaps import extends
from data_pipelines.splits import Split
from parpo_core.errors import DataError
from reward_models.data import RewardData
from reward_models.readout import RewardModel, _read_ids


@dataclass(frozen=True)
class TrainWindow:
    """Which train rows a retrain sees: those of the last ``days`` (None: all) before the newest
    row, plus a hash-stable share ``replay`` of the older ones (per (user, item) pair, ``seed``)."""

    days: float | None = None
    replay: float = 0.0
    seed: int = 0

    def label(self) -> str:
        return "all" if self.days is None else f"last:{self.days:g}d+replay:{self.replay:g}"


def parse_window(text: str) -> float | None:
    """``all`` -> None, ``last:7d`` -> 7.0 (days); DataError otherwise."""
    if text == "all":
        return None
    if text.startswith("last:") and text.endswith("d"):
        try:
            days = float(text[5:-1])
        except ValueError:
            days = -1.0
        if days > 0:
            return days
    raise DataError(f"--window {text!r}: use 'all' or 'last:<N>d' with N > 0 days (e.g. last:7d)")


def _pair_share(frame: pl.DataFrame, seed: int) -> pl.Series:
    """A uniform [0, 1) number per (user, item) pair, the same for every row of the pair."""
    h = pl.struct(pl.col("user_id"), pl.col("item_id")).hash(seed=seed)
    return frame.select((h % 1_000_003).cast(pl.Float64) / 1_000_003).to_series()


def window_train(train: pl.DataFrame, window: TrainWindow) -> pl.DataFrame:
    """The rows of ``train`` the window keeps (see ``TrainWindow``)."""
    if window.days is None or train.height == 0:
        return train
    start = train["ts"].max() - timedelta(days=window.days)
    recent = train["ts"] > start
    replay = _pair_share(train, window.seed) < window.replay
    return train.filter(recent | replay)


def windowed(split: Split, window: TrainWindow | None) -> Split:
    """``split`` with its train part cut to the window (valid and test untouched)."""
    if window is None or window.days is None:
        return split
    return Split(
        train=window_train(split.train, window),
        valid=split.valid,
        test=split.test,
        cold_profile=split.cold_profile,
        cold_test=split.cold_test,
        meta=split.meta | {"window": window.label()},
        path=split.path,
    )


def check_extends(base_dir: Path, base_fp: str, ds: Dataset) -> None:
    """One-line DataError when ``ds``'s id maps do not extend the base version's."""
    for kind in ("users", "items"):
        base = _read_ids(base_dir / "idmaps" / f"{kind}.parquet")
        new = ds.idmap(kind).sort("index")["id"].to_list()
        if not extends(base, new):
            raise DataError(
                f"{ds.root}: the {kind} id map (data {ds.fingerprint[:12]}) does not extend the base's "
                f"(data {base_fp[:12]}): ingest the new logs into the base's dataset so id maps only grow"
            )


@dataclass
class WarmStart:
    """Initial tables for the new model and where each row came from.

    ``user`` [n_users, nb * d], ``item`` [n_items, nb * d] (branches side by side, as
    ``CausalEmbeddings`` holds them); ``user_seen``/``item_seen`` [n] bool: rows the base had
    trained (they stay warm even when the window holds none of their rows)."""

    user: torch.Tensor
    item: torch.Tensor
    user_seen: np.ndarray
    item_seen: np.ndarray
    counts: dict[str, int]


def _new_items(base: RewardModel, ds: Dataset, item_ids: list[str], rows: np.ndarray) -> torch.Tensor | None:
    """The base's attribute map on items ``rows`` of the new id map [R, nb * d]; None without stage 1."""
    if base.stage1 is None or rows.size == 0:
        return None
    from reward_models.profile.spec import item_side

    s1 = base.stage1
    index = {k: i for i, k in enumerate(item_ids)}
    side = item_side(s1.spec, ds.items(), index, len(item_ids))  # price scaled over every item
    with torch.no_grad():
        x = side.features(len(s1.spec.categories))[torch.from_numpy(rows)]
        return s1.item_mean + s1.item_map(x)


def warm_start(
    base_dir: Path, ds: Dataset, data: RewardData, branches: tuple[str, ...], profiles: dict
) -> WarmStart:
    """The initial tables of a model on ``data`` warm-started from the version in ``base_dir``;
    ``profiles``: readout profiles of the users the base has not trained (their events)."""
    base = RewardModel.load(base_dir, verify=False)  # the caller opened (verified) it
    if tuple(base.branches) != tuple(branches):
        raise DataError(
            f"{base.name}: has branches {base.branches}, the retrain config {list(branches)}; "
            "retrain with the base's model settings"
        )
    user_ids, item_ids = data.user_ids(), data.item_ids()
    uv, _ = base.user_vectors(user_ids, profiles)
    iv, icold = base.item_vectors(item_ids)
    user = torch.cat([uv[b] for b in branches], 1)
    item = torch.cat([iv[b] for b in branches], 1)
    n_base_items = len(base.item_index)
    new_rows = np.arange(n_base_items, len(item_ids))
    mapped = _new_items(base, ds, item_ids, new_rows)
    if mapped is not None:
        item[torch.from_numpy(new_rows)] = mapped
    u_known = np.array([base.user_index.get(u, -1) for u in user_ids])
    i_known = np.array([base.item_index.get(i, -1) for i in item_ids])
    user_seen = np.zeros(len(user_ids), dtype=bool)
    item_seen = np.zeros(len(item_ids), dtype=bool)
    user_seen[u_known >= 0] = base.user_seen.numpy()[u_known[u_known >= 0]]
    item_seen[i_known >= 0] = base.item_seen.numpy()[i_known[i_known >= 0]]
    counts = {
        "users_copied": int(user_seen.sum()),
        "users_from_profile": int((~user_seen).sum()),
        "items_copied": int(item_seen.sum()),
        "items_from_attributes": int((~item_seen).sum()) if base.stage1 is not None else 0,
        "items_mean": 0 if base.stage1 is not None else int((~item_seen).sum()),
        "items_cold_in_base": int(icold.sum()),
    }
    return WarmStart(user.float(), item.float(), user_seen, item_seen, counts)


def train_profiles(data: RewardData) -> dict:
    """Readout profiles of users from their train positives (what places a new warm user)."""
    from reward_models.readout import UserProfile

    users, items = data.user_ids(), data.item_ids()
    out = {}
    for u in np.unique(data.train_user).tolist():
        s, e = data.train.indptr[u], data.train.indptr[u + 1]
        out[users[u]] = UserProfile(items=[items[i] for i in data.train.indices[s:e].tolist()])
    return out


def merge_seen(weights: dict[str, torch.Tensor], warm: WarmStart) -> dict[str, torch.Tensor]:
    """Exported weights whose warm flags also count the rows the base trained."""
    out = dict(weights)
    for side, seen in (("user", warm.user_seen), ("item", warm.item_seen)):
        out[f"{side}_seen"] = (weights[f"{side}_seen"].bool() | torch.from_numpy(seen)).to(torch.uint8)
    return out
