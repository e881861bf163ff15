"""Anchor files: an ``AnchorStore`` as one parquet file (users with history; settings and the
format version in the schema metadata), written atomically. Policy versions ship theirs as
``anchors.parquet``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from parpo.algorithms.anchors import FORMAT_VERSION, AnchorStore
from parpo_core.durable import atomic_write_with

_META_KEY = b"parpo.anchors"
_COLUMNS = ("user", "mean", "var", "count", "n_obs")


def save_anchors(store: AnchorStore, path: str | os.PathLike[str]) -> Path:
    """Write ``store`` to a parquet file atomically (temp file + fsync + rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    st = store.state_dict()
    meta = {"format_version": FORMAT_VERSION, "alpha": st["alpha"], "warmup": st["warmup"]}
    table = pa.table({k: pa.array(st[k].numpy()) for k in _COLUMNS}).replace_schema_metadata(
        {_META_KEY: json.dumps(meta)}
    )
    return atomic_write_with(Path(path), lambda tmp: pq.write_table(table, tmp))


def load_anchors(path: str | os.PathLike[str]) -> AnchorStore:
    """Read a store written by ``save_anchors``."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    meta = json.loads((table.schema.metadata or {}).get(_META_KEY, b"{}"))
    if not meta:
        raise ValueError(f"{path}: not a PARPO anchor file (missing {_META_KEY.decode()!r} metadata)")
    cols = {k: torch.from_numpy(table.column(k).to_numpy().copy()) for k in _COLUMNS}
    store = AnchorStore(alpha=meta["alpha"], warmup=meta["warmup"])
    store.load_state_dict({**meta, **cols})
    return store
