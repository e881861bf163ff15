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


def keys(df: pl.DataFrame) -> set[tuple[str | None, int]]:
    """Row identity inside a dataset: (user_id, seq)."""
    return set(zip(df.get_column("user_id").to_list(), df.get_column("seq").to_list(), strict=True))
