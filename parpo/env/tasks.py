"""Tasks = (user, request, context), drawn from a split's held-out positives.

A task's request comes from one positive of the user (the *target*), in the API's request
shapes: its category (ML-100K: the first genre; synthetic: its category) or, for items without
a category (Amazon), ``TaskConfig.attributes`` of its attribute ids as a hard constraint; a
target with neither (a shop's log with no item table) makes an *open* request with no scope.
Where the data has prices, a price cap ``price(target) * U(low, high)`` (rounded up to the
cent, so the target itself is always feasible) is drawn with probability ``p``; so an open
request is price-cap only or empty. With ``TaskConfig.open_share`` a scoped request drops its
scope with that probability (from a stream of its own: the other draws stay as they were).
Training tasks come from the split's ``train`` part, warm evaluation tasks from ``test``, cold
ones from ``cold_test`` (users held out of training), whose ``cold_profile`` gives the profile.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from data_pipelines.splits import Split
from parpo.env.catalogue import Catalogue
from parpo.env.config import TaskConfig
from parpo.env.schema import Constraints, Request

#: Split part -> task set name.
PARTS = {"train": "train", "warm": "test", "cold": "cold_test"}


@dataclass(frozen=True)
class Task:
    """One episode's setting. ``target``: the held-out positive (reporting only: hit@10, NDCG@10).

    ``profile``: a cold user's recent item ids (the reward model scores it through them);
    ``candidates``: restricts search to these ids (the API's ``candidates``); ``k``: the slate
    size (None: the env config's).
    """

    task_id: str
    user_id: str
    request: Request
    target: str
    cold: bool = False
    profile: tuple[str, ...] | None = None
    candidates: tuple[str, ...] | None = None
    k: int | None = None
    context: dict[str, Any] = field(default_factory=dict)


def _rng(seed: int, name: str) -> np.random.Generator:
    # Stable across runs and processes (Python's hash() is salted).
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def cold_profiles(split: Split) -> dict[str, tuple[str, ...]]:
    """Cold user -> item ids of the profile: the ``cold_profile`` events other than impressions
    (all of them when a user has only impressions), in time order."""
    prof = split.cold_profile
    if prof.height == 0:
        return {}
    prof = prof.with_columns((pl.col("event") != "impression").alias("__pos"))
    has_pos = prof.group_by("user_id").agg(pl.col("__pos").any().alias("__any"))
    kept = prof.join(has_pos, on="user_id").filter(pl.col("__pos") | ~pl.col("__any"))
    rows = kept.group_by("user_id", maintain_order=True).agg(pl.col("item_id"))
    return {u: tuple(items) for u, items in zip(rows["user_id"], rows["item_id"].to_list(), strict=True)}


def make_tasks(
    split: Split,
    catalogue: Catalogue,
    which: str,
    cfg: TaskConfig,
    *,
    per_user: int,
    max_tasks: int | None = None,
) -> list[Task]:
    """Tasks of one set: ``which`` in ``train``, ``warm``, ``cold`` (see ``PARTS``).

    At most ``per_user`` per user and ``max_tasks`` in all (users drawn at random, seeded by
    ``cfg.seed`` and ``which``). Targets missing from the catalogue are skipped.
    """
    if which not in PARTS:
        raise ValueError(f"unknown task set {which!r}; choose from {list(PARTS)}")
    part = getattr(split, PARTS[which]).select("user_id", "item_id").drop_nulls()
    profiles = cold_profiles(split) if which == "cold" else {}
    cold_users = set(split.cold_profile["user_id"].unique().to_list()) if split.cold_profile.height else set()
    if which != "cold" and cold_users:
        part = part.filter(~pl.col("user_id").is_in(list(cold_users)))  # never a cold user in warm tasks
    if which != "train":
        # A pair with several positive events (click, cart, buy) can have rows on both sides of
        # the split: such a target was seen in training, so it does not make an evaluation task.
        part = part.join(
            split.train.select("user_id", "item_id").unique(), on=["user_id", "item_id"], how="anti"
        )
    rows = catalogue.rows(part["item_id"].to_list())
    usable = rows >= 0
    rng = _rng(cfg.seed, which)
    part = (
        part.with_columns(pl.Series("__row", rows), pl.Series("__key", rng.random(part.height)))
        .filter(pl.Series(usable))
        .sort("user_id", "__key")
        .group_by("user_id", maintain_order=True)
        .head(per_user)
    )
    if max_tasks is not None and part.height > max_tasks:
        users = part["user_id"].unique(maintain_order=True).to_numpy()
        rng.shuffle(users)
        # Whole users first (their tasks stay together), then trim to max_tasks.
        counts = part.group_by("user_id", maintain_order=True).len()
        n = dict(zip(counts["user_id"], counts["len"], strict=True))
        keep, total = [], 0
        for u in users:
            if total >= max_tasks:
                break
            keep.append(u)
            total += n[u]
        part = part.filter(pl.col("user_id").is_in(keep)).head(max_tasks)
    caps = rng.random(part.height) < cfg.price_cap.p
    mult = rng.uniform(cfg.price_cap.low, cfg.price_cap.high, part.height)
    scoped = _rng(cfg.seed, f"{which}/open").random(part.height) >= cfg.open_share
    tasks = []
    for n, (user, item, row) in enumerate(part.select("user_id", "item_id", "__row").iter_rows()):
        c = int(catalogue.cat[row]) if scoped[n] else -1
        category = catalogue.categories[c] if c >= 0 else None
        attrs: list[str] = []
        if category is None and cfg.attributes and scoped[n]:
            mine = catalogue.attr_codes[catalogue.attr_rows == row]
            attrs = [catalogue.attributes[a] for a in mine[: cfg.attributes]]
        price = float(catalogue.price[row])
        cap = math.ceil(price * mult[n] * 100) / 100 if caps[n] and math.isfinite(price) else None
        request = Request(category=category, constraints=Constraints(price_max=cap, attributes=attrs))
        tasks.append(
            Task(
                task_id=f"{which}/{n}",
                user_id=user,
                request=request,
                target=item,
                cold=which == "cold",
                profile=profiles.get(user) if which == "cold" else None,
                context={"part": PARTS[which]},
            )
        )
    return tasks
