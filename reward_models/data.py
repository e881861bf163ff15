"""A split as dense index arrays: what training and evaluation of the reward model read.

Positives are distinct (user, item) pairs of the split's train part; a pair's
weight is the largest positives-rule weight among its events (a click and a
purchase of the same item are one positive of the purchase's weight).
Popularity is the true train count: distinct train users per item.
Indices are the dataset's id maps (``Dataset.idmap``), so every user and item
of the dataset has a row, including cold ones the split keeps out of train.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from data_pipelines.dataset import Dataset
from data_pipelines.metrics import Csr, csr_from_pairs
from data_pipelines.splits import ALGORITHM, PositivesRule, Split, load_split, meta_algorithm

if TYPE_CHECKING:
    from reward_models.exposure import Exposure
    from reward_models.features import SideFeatures


def index_pairs(frame: pl.DataFrame, users: pl.DataFrame, items: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (user_id, item_id, ...) with ``u``, ``i`` dense indices added (inner join on the maps)."""
    return frame.join(
        users.select(pl.col("id").alias("user_id"), pl.col("index").alias("u")), on="user_id", how="inner"
    ).join(items.select(pl.col("id").alias("item_id"), pl.col("index").alias("i")), on="item_id", how="inner")


@dataclass
class RewardData:
    """One split of one dataset, indexed. Csr parts have ``n_users`` rows."""

    root: Path
    fingerprint: str
    split: str
    seed: int
    algorithm: int  # the split algorithm (data_pipelines.splits: 1 rows, 2 pairs)
    rule: PositivesRule
    users: pl.DataFrame  # id map: id, index
    items: pl.DataFrame
    train_user: np.ndarray  # [N] int64, distinct pairs
    train_item: np.ndarray  # [N] int64
    train_weight: np.ndarray  # [N] float32
    popularity: np.ndarray  # [n_items] int64: distinct train users per item
    train: Csr
    valid: Csr
    test: Csr
    cold_profile: pl.DataFrame = field(repr=False, default_factory=pl.DataFrame)
    cold_test: pl.DataFrame = field(repr=False, default_factory=pl.DataFrame)
    meta: dict[str, Any] = field(default_factory=dict, repr=False)
    # Attached for training when the config asks (``reward_models.pipeline.attach_side_inputs``).
    exposure: Exposure | None = field(default=None, repr=False)
    user_features: SideFeatures | None = field(default=None, repr=False)
    item_features: SideFeatures | None = field(default=None, repr=False)

    @property
    def n_users(self) -> int:
        return self.users.height

    @property
    def n_items(self) -> int:
        return self.items.height

    @property
    def n_train(self) -> int:
        return int(self.train_user.shape[0])

    @classmethod
    def load(
        cls,
        dataset: Dataset | str | Path,
        name: str,
        seed: int = 0,
        rule: PositivesRule | None = None,
        algorithm: int = ALGORITHM,
    ) -> RewardData:
        ds = dataset if isinstance(dataset, Dataset) else Dataset(dataset)
        rule = rule or PositivesRule()
        return cls.from_split(ds, load_split(ds, name, seed, rule, algorithm=algorithm), rule)

    @classmethod
    def from_split(cls, ds: Dataset, split: Split, rule: PositivesRule) -> RewardData:
        users, items = ds.idmap("users").sort("index"), ds.idmap("items").sort("index")
        n_users, n_items = users.height, items.height
        for name, m in (("users", users), ("items", items)):
            if m.height and not (m["index"].to_numpy() == np.arange(m.height)).all():
                raise ValueError(f"{ds.root}: the {name} id map is not dense (indices 0..n-1)")
        train = (
            index_pairs(split.train.with_columns(rule.weight().alias("w")), users, items)
            .group_by("u", "i")
            .agg(pl.col("w").max())
            .sort("u", "i")
        )
        tu, ti = train["u"].to_numpy().astype(np.int64), train["i"].to_numpy().astype(np.int64)

        def csr(frame: pl.DataFrame) -> Csr:
            f = index_pairs(frame, users, items)
            return csr_from_pairs(f["u"].to_numpy(), f["i"].to_numpy(), n_users)

        return cls(
            root=ds.root,
            fingerprint=ds.fingerprint,
            split=split.meta.get("name", ""),
            seed=int(split.meta.get("seed", 0)),
            algorithm=meta_algorithm(split.meta),
            rule=rule,
            users=users,
            items=items,
            train_user=tu,
            train_item=ti,
            train_weight=train["w"].to_numpy().astype(np.float32),
            popularity=np.bincount(ti, minlength=n_items).astype(np.int64),
            train=csr_from_pairs(tu, ti, n_users),
            valid=csr(split.valid),
            test=csr(split.test),
            cold_profile=split.cold_profile,
            cold_test=split.cold_test,
            meta=split.meta,
        )

    def user_ids(self) -> list[str]:
        """External user ids in index order."""
        return self.users["id"].to_list()

    def item_ids(self) -> list[str]:
        return self.items["id"].to_list()

    def seen_users(self) -> np.ndarray:
        """[n_users] bool: users with at least one train positive (warm)."""
        return self.train.lengths() > 0

    def seen_items(self) -> np.ndarray:
        """[n_items] bool: items with at least one train positive (warm)."""
        return self.popularity > 0
