"""Dense, persisted, append-only id maps (external string id -> int index).

Indices are assigned in order of first appearance and never change: extending a
map only appends. The reward model, policy, memory and server share them.
"""

from __future__ import annotations

import hashlib

import polars as pl

SCHEMA = {"id": pl.String, "index": pl.Int64}


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)


def extend(existing: pl.DataFrame, ids: pl.Series) -> pl.DataFrame:
    """Append the ids not yet in ``existing`` (kept in the order given; nulls skipped)."""
    new = (
        pl.DataFrame({"id": ids.cast(pl.String)})
        .drop_nulls()
        .unique(maintain_order=True)
        .join(existing.select("id"), on="id", how="anti", maintain_order="left")
    )
    start = existing.height
    new = new.with_columns(pl.int_range(start, start + new.height, dtype=pl.Int64).alias("index"))
    return pl.concat([existing.select(SCHEMA.keys()), new])


def ids_fingerprint(ids: list[str]) -> str:
    """sha256 of the ids in index order (one per line)."""
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def extends(base: list[str], new: list[str]) -> bool:
    """Whether the id map ``new`` (ids in index order) extends ``base``: the same ids at the same
    indices, new ids after them."""
    return len(new) >= len(base) and new[: len(base)] == base
