"""Batch inference: a parquet of requests in, a parquet of slates out (``parpo policy predict``).

Request columns: ``request_id`` and ``user_id`` (strings, required); optional ``category``
(string), ``price_min``/``price_max`` (numbers), ``attributes`` (list of strings),
``candidates`` (list of item ids the slate must come from), ``k`` (slate size, 1..100) and
``profile`` (recent item ids of a user the reward model has not seen). A row that breaks the
schema stops the job with one line naming the row and the field; nothing is written then.

Output, one row per request in input order: ``request_id``, ``user_id``, ``items`` (the slate,
best first), ``plan`` (the tool calls, e.g. ``search:price_asc+c>recommend``), ``steps``,
``cold``, ``preference`` (the reward model's preference reward of the slate) and the policy
and reward versions that answered.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import ValidationError

from parpo.env.environment import BatchEnv
from parpo.env.evaluate import run_episodes
from parpo.env.schema import MAX_ITEMS, Constraints, Request
from parpo.env.tasks import Task
from parpo.policy.agent import PolicyAgent
from parpo.policy.bundle import PolicyBundle
from parpo_core.durable import atomic_write_bytes
from parpo_core.errors import DataError

REQUIRED = ("request_id", "user_id")
OPTIONAL = ("category", "price_min", "price_max", "attributes", "candidates", "k", "profile")


def read_requests(path: str | Path, known_users: set[str] | dict[str, int]) -> list[Task]:
    """Tasks from a requests parquet; ``DataError`` names the first bad row and field."""
    try:
        df = pl.read_parquet(path)
    except Exception as e:  # noqa: BLE001  (any unreadable file is the user's input problem)
        raise DataError(f"{path}: not a readable parquet file ({e.__class__.__name__})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing required column(s) {missing}")
    unknown = sorted(set(df.columns) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise DataError(f"{path}: unknown column(s) {unknown}; allowed: {[*REQUIRED, *OPTIONAL]}")
    tasks = []
    for n, row in enumerate(df.iter_rows(named=True), start=1):
        tasks.append(_task(row, n, path, known_users))
    return tasks


def _task(row: dict[str, Any], n: int, path: str | Path, known_users: Any) -> Task:
    where = f"{path} row {n}"
    for c in REQUIRED:
        if not isinstance(row.get(c), str) or not row[c]:
            raise DataError(f"{where}: {c} must be a non-empty string")
    try:
        request = Request(
            category=row.get("category"),
            constraints=Constraints(
                price_min=row.get("price_min"),
                price_max=row.get("price_max"),
                attributes=list(row.get("attributes") or []),
            ),
        )
    except ValidationError as e:
        err = e.errors()[0]
        raise DataError(f"{where}: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None
    k = row.get("k")
    if k is not None and not 1 <= int(k) <= MAX_ITEMS:
        raise DataError(f"{where}: k must be between 1 and {MAX_ITEMS} (got {k})")
    cands = row.get("candidates")
    profile = row.get("profile")
    user = row["user_id"]
    return Task(
        task_id=row["request_id"],
        user_id=user,
        request=request,
        target="",
        cold=user not in known_users,
        profile=tuple(profile) if profile else None,
        candidates=tuple(cands) if cands is not None else None,
        k=None if k is None else int(k),
    )


def predict_file(
    registry: str | Path,
    requests: str | Path,
    out: str | Path,
    version: str | None = None,
    *,
    batch_size: int = 1024,
) -> int:
    """Answer every request of ``requests`` with ``version`` (default: production); returns the count."""
    bundle = PolicyBundle.load(registry, version)
    tasks = read_requests(requests, bundle.reward_model.user_index)
    env = BatchEnv(bundle.catalogue, bundle.reward_model, bundle.env)
    per_task = run_episodes(env, PolicyAgent(bundle.policy), tasks, batch_size=batch_size)
    result = per_task.select(
        pl.col("task_id").alias("request_id"),
        "user_id",
        pl.col("slate").alias("items"),
        "plan",
        "steps",
        "cold",
        "preference",
    ).with_columns(
        pl.lit(bundle.version.name).alias("policy_version"),
        pl.lit(bundle.reward_version).alias("reward_version"),
    )
    buf = io.BytesIO()
    result.write_parquet(buf)
    atomic_write_bytes(Path(out), buf.getvalue())
    return result.height
