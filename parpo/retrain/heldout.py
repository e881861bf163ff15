"""The held-out sets a retrain is judged on, fixed before training, and the paired per-user metrics.

Both sets are test pairs of the reward config's split cut on the new dataset (so the candidate
never trains on them, whatever its window):

    old  (a)  test pairs of the rows the base version was trained beside, ranked among the
              items the base knows (a new item in the candidate's list is not a miss on (a))
    new  (b)  test pairs of the rows added since, ranked among every item

The base's rows are the longest prefix of the dataset's partitions (one per ingest, in order)
whose fingerprint is the base's data fingerprint (``parpo data ingest`` appends partitions, so
the dataset a version was trained on is such a prefix). When no prefix matches (the logs were
re-ingested elsewhere), ``old`` is the pairs whose user and item the base knows and ``new`` the
others; the record says which rule was used. Each set is fingerprinted (sha256 of its sorted
``user<TAB>item`` lines) so a gate record names exactly what it was decided on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from data_pipelines.dataset import Dataset, fingerprint_of
from data_pipelines.metrics import Csr, csr_rows, full_sort_topk, per_user_ranking_metrics
from data_pipelines.splits import load_split
from reward_models.config import RewardSplitConfig
from reward_models.data import RewardData, index_pairs
from reward_models.evaluate import Vectors, union
from reward_models.readout import RewardModel

SETS = ("old", "new")
K = 10


def base_partitions(ds: Dataset, base_fp: str) -> list[str] | None:
    """Paths of the partition prefix whose fingerprint is ``base_fp`` (None: no prefix is)."""
    parts = ds.manifest["partitions"]
    for n in range(len(parts), -1, -1):
        if fingerprint_of({"partitions": parts[:n]}) == base_fp:
            return [p["path"] for p in parts[:n]]
    return None


def pairs_fingerprint(frame: pl.DataFrame) -> str:
    """sha256 of the sorted distinct ``user<TAB>item`` lines of ``frame``."""
    pairs = frame.select("user_id", "item_id").unique().sort("user_id", "item_id")
    text = "\n".join(f"{u}\t{i}" for u, i in pairs.iter_rows())
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class HeldOut:
    """The split on the new data (``data``), each set's truth (Csr, ``n_users`` rows), the number
    of items ranked for it (the first ``items[set]`` indices) and its record."""

    data: RewardData
    sets: dict[str, Csr]
    items: dict[str, int]
    record: dict[str, Any]


def held_out(
    ds: Dataset, split: RewardSplitConfig, base_fp: str, n_base_users: int, n_base_items: int
) -> HeldOut:
    """Cut the split on ``ds`` and divide its test pairs into ``old`` and ``new`` (module docstring)."""
    cut = load_split(ds, split.name, split.seed, split.positives, algorithm=split.algorithm)
    data = RewardData.from_split(ds, cut, split.positives)
    test = index_pairs(cut.test, data.users, data.items)
    prefix = base_partitions(ds, base_fp)
    if prefix is not None:
        keys = (
            pl.scan_parquet([ds.root / p for p in prefix]).select("user_id", "seq").collect()
            if prefix
            else pl.DataFrame(schema={"user_id": test.schema["user_id"], "seq": test.schema["seq"]})
        )
        old_rows = test.join(keys, on=["user_id", "seq"], how="semi")
        rule = f"rows of the first {len(prefix)} of {len(ds.manifest['partitions'])} partitions"
    else:
        old_rows = test.filter((pl.col("u") < n_base_users) & (pl.col("i") < n_base_items))
        rule = "pairs whose user and item the base knows (no partition prefix has its fingerprint)"
    parts = {"old": old_rows, "new": test.join(old_rows, on=["user_id", "seq"], how="anti")}
    sets, record = {}, {"split": split.model_dump(mode="json"), "base_rows": rule}
    for name, rows in parts.items():
        sets[name] = _csr(rows, data.n_users)
        record[name] = {
            "pairs": int(rows.select("u", "i").unique().height),
            "users": int(rows["u"].n_unique()),
            "fingerprint": pairs_fingerprint(rows),
        }
    return HeldOut(data, sets, {"old": n_base_items, "new": data.n_items}, record)


def csr_clip(csr: Csr, n_items: int) -> Csr:
    """``csr`` without the items at indices ``n_items`` and above."""
    from data_pipelines.metrics import csr_from_pairs

    keep = csr.indices < n_items
    return csr_from_pairs(csr.row_ids()[keep], csr.indices[keep], csr.n_rows)


def _csr(rows: pl.DataFrame, n_users: int) -> Csr:
    from data_pipelines.metrics import csr_from_pairs

    return csr_from_pairs(rows["u"].to_numpy(), rows["i"].to_numpy(), n_users)


def per_user_metrics(model: RewardModel, h: HeldOut, profiles: dict) -> dict[str, dict[str, np.ndarray]]:
    """Per set: ``users`` [U] (indices with held-out pairs) and each metric@10 [U] of ``model``,
    ranking every item by the click score with the split's train and valid items masked."""
    data = h.data
    uv, _ = model.user_vectors(data.user_ids(), profiles)
    iv, _ = model.item_vectors(data.item_ids())
    exclude = union(data.train, data.valid)
    out = {}
    for name, truth in h.sets.items():
        users = np.flatnonzero(truth.lengths() > 0)
        if users.size == 0:
            out[name] = {"users": users}
            continue
        n = h.items[name]
        scorer = Vectors(uv, {b: v[:n] for b, v in iv.items()}).scorer("click")
        topk = full_sort_topk(scorer, users, n, csr_clip(exclude, n), K)
        m = per_user_ranking_metrics(topk, csr_rows(truth, users), ks=(K,))
        out[name] = {"users": users} | {k: v for k, v in m.items() if k.endswith(f"@{K}")}
    return out
