"""Small datasets for the split tests, built through the real ingest.

Rows are written as canonical parquet and ingested with the canonical
adapter; ``source`` renames the Source so a test can pose as Coat or OBD.
"""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from data_pipelines.adapters import canonical
from data_pipelines.dataset import Dataset
from data_pipelines.ingest import ingest

T0 = datetime(2021, 1, 1, tzinfo=UTC)


def make_dataset(root: Path, rows: pl.DataFrame, source: str = "canonical") -> Dataset:
    """Ingest ``rows`` (canonical columns, no seq) into ``root`` (appending if it exists)."""
    root.mkdir(parents=True, exist_ok=True)
    inbox = root.parent / f"{root.name}-inbox"
    inbox.mkdir(exist_ok=True)
    path = inbox / f"{uuid.uuid4().hex[:8]}.parquet"
    rows.write_parquet(path)
    src = canonical.source(path)
    src.name = source
    summary = ingest(src, root)
    assert summary["rows_rejected"] == 0, summary
    return Dataset(root)


def long_tail_rows(
    n_users: int = 300, n_items: int = 200, *, seed: int = 0, user_prefix: str = "u", zipf: float = 1.1
) -> pl.DataFrame:
    """Users with 4..40 distinct items each, items drawn by a Zipf-like popularity
    (item ``i`` has weight 1 / (i + 1) ** zipf); events mix clicks, buys, and a few
    impressions; timestamps increase within a user."""
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, n_items + 1) ** zipf
    pop /= pop.sum()
    sizes = rng.integers(4, 41, size=n_users)
    users = np.repeat(np.arange(n_users), sizes)
    items = np.concatenate([rng.choice(n_items, size=k, replace=False, p=pop) for k in sizes])
    secs = np.concatenate([np.sort(rng.choice(10**7, size=k, replace=False)) for k in sizes])
    events = rng.choice(["click", "buy", "impression", "view"], size=users.size, p=[0.6, 0.1, 0.2, 0.1])
    return pl.DataFrame(
        {
            "user_id": [f"{user_prefix}{u}" for u in users],
            "item_id": [f"i{i}" for i in items],
            "ts": [T0 + timedelta(seconds=int(s)) for s in secs],
            "event": events,
        }
    )


def profile_size(n: int) -> int:
    """Hand formula for the cold profile: earliest max(3, ceil(20%)) events, at most all."""
    return min(n, max(3, math.ceil(0.2 * n)))


def keys(df: pl.DataFrame) -> set[tuple[str | None, str | None, int]]:
    """Row identity inside a dataset: (user_id, request_id, seq); seq counts per user, or per request."""
    return set(df.select("user_id", "request_id", "seq").iter_rows())


def coat_rows(n_users: int = 40, n_items: int = 60, seed: int = 0) -> pl.DataFrame:
    """Coat-like ratings without timestamps: per user 12 self-selected and 5 uniformly random
    ratings (1..5) of distinct items."""
    rng = np.random.default_rng(seed)
    frames = []
    for policy, k in (("self_selected", 12), ("uniform_random", 5)):
        items = np.concatenate([rng.choice(n_items, size=k, replace=False) for _ in range(n_users)])
        frames.append(
            pl.DataFrame(
                {
                    "user_id": [f"u{u}" for u in np.repeat(np.arange(n_users), k)],
                    "item_id": [f"i{i}" for i in items],
                    "event": "rate",
                    "value": rng.integers(1, 6, size=items.size).astype(float),
                    "logging_policy": policy,
                }
            )
        )
    return pl.concat(frames)


def obd_rows(n_requests: int = 200, seed: int = 0) -> pl.DataFrame:
    """OBD-like anonymous slates: per policy and request 3 impressions (positions 1..3,
    propensities) and a click on position 1 for every 4th request."""
    rng = np.random.default_rng(seed)
    rows = []
    for policy in ("uniform_random", "obd_bts"):
        for r in range(n_requests):
            shown = rng.choice(30, size=3, replace=False)
            when = T0 + timedelta(minutes=r)
            for pos, item in enumerate(shown, start=1):
                rows.append((f"{policy}-{r}", f"i{item}", when, "impression", pos, 1 / 30, policy))
            if r % 4 == 0:
                rows.append((f"{policy}-{r}", f"i{shown[0]}", when, "click", 1, 1 / 30, policy))
    cols = ["request_id", "item_id", "ts", "event", "position", "propensity", "logging_policy"]
    return pl.DataFrame(rows, schema=cols, orient="row").with_columns(
        pl.lit(None, dtype=pl.String).alias("user_id"), pl.col("position").cast(pl.Int32)
    )


def assert_intervened_counts(n_per_user: pl.DataFrame, got: dict[str, dict[str, int]]) -> None:
    """Each user's test/valid/train counts as the ``intervened`` protocol sets them from the user's
    number of positive units ``n`` (rows or pairs): half stays normal, the intervened rest splits
    into test (half, rounded up) and valid (half of what remains); ``n_per_user``: (user, n) rows,
    ``got``: part -> user -> count."""
    for user, n in n_per_user.iter_rows():
        normal = math.ceil(n / 2)
        m = math.ceil((n - normal) / 2)
        n_test = math.ceil(m / 2)
        n_valid = (m - n_test) // 2
        assert got["test"].get(user, 0) == n_test, user
        assert got["valid"].get(user, 0) == n_valid, user
        assert got["train"].get(user, 0) == normal + m - n_test - n_valid, user
