"""Stable hashes that pick cold users/items and stand in for random numbers.

Every "random" choice in a split is a function of (seed, purpose, ids), never
of row order or of a random generator's stream, so:

- a user's (or item's) fate depends only on its own id and the seed: appending
  new users never moves an existing user in or out of the cold set;
- results are identical across polars/numpy versions and machines.

Ids are hashed with sha256 over ``f"{seed}\\x1f{id}"`` (the first 8 bytes,
big-endian, as an unsigned 64-bit integer). sha256 runs in Python, but only
over *distinct* ids (users, items or requests: few next to rows); polars'
own ``hash`` is not stable across polars versions, so it is not used. Per-row
numbers mix the id hash with a purpose salt and ``seq`` through the
SplitMix64 finaliser (Steele et al., 2014), vectorised in numpy.
"""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def id_hash64(ids: pl.Series, seed: int) -> pl.Series:
    """UInt64 hash of each id under ``seed``: sha256(f"{seed}\\x1f{id}")[:8], big-endian.

    ``ids``: string series [N], nulls allowed (they hash to null). Computed once
    per distinct id and joined back, so the Python cost is O(distinct ids).
    """
    distinct = ids.drop_nulls().unique()
    prefix = hashlib.sha256(f"{seed}\x1f".encode())  # hashed once; each id continues a copy
    digests = []
    for i in distinct.cast(pl.String).to_list():
        h = prefix.copy()
        h.update(i.encode())
        digests.append(h.digest()[:8])
    values = np.frombuffer(b"".join(digests), dtype=">u8").astype(np.uint64)
    table = pl.DataFrame({"__id": distinct, "__h": pl.Series(values, dtype=pl.UInt64)})
    out = pl.DataFrame({"__id": ids}).join(table, on="__id", how="left", maintain_order="left")
    return out.get_column("__h").alias(ids.name)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser, elementwise on uint64 [N] (wrapping arithmetic)."""
    z = x.astype(np.uint64) + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def purpose_salt(purpose: str) -> np.uint64:
    """A fixed 64-bit salt per purpose name, so that independent choices use independent bits."""
    return np.uint64(int.from_bytes(hashlib.sha256(purpose.encode()).digest()[:8], "big"))


def to_unit(z: np.ndarray) -> np.ndarray:
    """uint64 [N] -> float64 [N] strictly inside (0, 1): the top 53 bits, centred in their cell."""
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def uniform(h: np.ndarray, purpose: str, seq: np.ndarray | None = None) -> np.ndarray:
    """Float64 [N] in (0, 1): a pseudo-random number per (id hash, purpose[, seq]).

    ``h``: uint64 [N] from ``id_hash64`` (the seed is already in it);
    ``seq``: int64 [N] to get one number per row of an id, or None for one per id.
    """
    z = mix64(h.astype(np.uint64) ^ purpose_salt(purpose))
    if seq is not None:
        z = mix64(z ^ mix64(seq.astype(np.int64).view(np.uint64)))
    return to_unit(z)
