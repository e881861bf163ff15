"""A canonical dataset folder, read through its manifest.

Layout of ``DIR``::

    manifest.json        what is published: ingests, partitions, tables, fingerprint
    summary.json         accounting and counts (cumulative over ingests)
    interactions/        parquet partitions (canonical schema; a user's rows together, in seq order)
    items.parquet users.parquet contexts.parquet [observation_propensities.parquet]
    idmaps/{users,items}.parquet   dense, append-only indices
    rejects/<ingest>.parquet       every rejected line: raw text, line number, reason
    state/               dedupe keys of earlier ingests
    splits/<name>/<seed>-<rule-hash>/   (see ``data_pipelines.splits``)

Only files listed in the manifest are read, so a crashed ingest's leftovers are
never visible.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import polars as pl

from data_pipelines.schema import SCHEMA_VERSION
from data_pipelines.transaction import read_manifest, recover
from parpo_core.errors import DataError

FEATURES = pl.List(pl.Struct({"key": pl.String, "value": pl.String}))


def fingerprint_of(manifest: dict[str, Any]) -> str:
    """sha256 over the sorted partition hashes and the schema version."""
    h = hashlib.sha256(f"schema_version={SCHEMA_VERSION}\n".encode())
    for sha in sorted(p["sha256"] for p in manifest["partitions"]):
        h.update(sha.encode())
    return h.hexdigest()


class Dataset:
    """Read access to a canonical dataset folder."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if any(self.root.glob(".txn-*")):
            recover(self.root)
        manifest = read_manifest(self.root)
        if manifest is None:
            raise DataError(
                f"{self.root}: not a PARPO dataset (no manifest.json); create one with `parpo data ingest`"
            )
        if manifest.get("schema_version") != SCHEMA_VERSION:
            raise DataError(
                f"{self.root}: schema_version {manifest.get('schema_version')} is not {SCHEMA_VERSION}; re-ingest the source"
            )
        self.manifest = manifest

    @property
    def source(self) -> str:
        return self.manifest["source"]

    @property
    def fingerprint(self) -> str:
        return self.manifest["fingerprint"]

    def partition_paths(self) -> list[Path]:
        return [self.root / p["path"] for p in self.manifest["partitions"]]

    def interactions(self) -> pl.LazyFrame:
        """All interactions (canonical schema) as a lazy scan."""
        paths = self.partition_paths()
        if not paths:
            from data_pipelines.schema import INTERACTIONS, polars_schema

            return pl.LazyFrame(schema=polars_schema(INTERACTIONS))
        return pl.scan_parquet(paths)

    def table(self, name: str) -> pl.DataFrame | None:
        """A side table; map columns (features) come as list<struct<key, value>>."""
        entry = self.manifest.get("tables", {}).get(name)
        if not entry:
            return None
        df = pl.read_parquet(self.root / entry["path"])
        maps = [c for c, t in df.schema.items() if isinstance(t, pl.Map)]
        return df.with_columns(pl.col(c).cast(FEATURES) for c in maps) if maps else df

    def items(self) -> pl.DataFrame:
        return self._required("items")

    def users(self) -> pl.DataFrame:
        return self._required("users")

    def contexts(self) -> pl.DataFrame:
        return self._required("contexts")

    def idmap(self, kind: str) -> pl.DataFrame:
        """``kind`` in {"users", "items"}: columns id (string), index (int64)."""
        return self._required(f"idmaps/{kind}")

    def _required(self, name: str) -> pl.DataFrame:
        df = self.table(name)
        if df is None:
            raise DataError(f"{self.root}: manifest lists no '{name}' table")
        return df

    def dedupe_keys(self) -> pl.DataFrame:
        paths = [self.root / i["dedupe_keys"] for i in self.manifest["ingests"]]
        return pl.read_parquet(paths) if paths else pl.DataFrame(schema={"h1": pl.UInt64, "h2": pl.UInt64})

    def next_seq(self) -> pl.DataFrame:
        """Per seq key (user, or request for anonymous rows): the next free ``seq``."""
        from data_pipelines.schema import SEQ_KEY

        return self.interactions().group_by(SEQ_KEY).agg((pl.col("seq").max() + 1).alias("__base")).collect()

    def summary(self) -> dict[str, Any]:
        return json.loads((self.root / "summary.json").read_text())

    @staticmethod
    def summarize(manifest: dict[str, Any], partitions: list[Path]) -> dict[str, Any]:
        """Cumulative accounting and counts for ``summary.json``."""
        ingests = manifest["ingests"]
        totals = {
            k: sum(i.get(k, 0) for i in ingests)  # ids_trimmed: 0 for ingests before it was counted
            for k in ("rows_in", "rows_accepted", "rows_rejected", "rows_written", "ids_trimmed")
        }
        if partitions:
            lf = pl.scan_parquet(partitions)
            # One collect for both queries: the partitions are read once, not twice.
            totals_df, events = pl.collect_all(
                [
                    lf.select(
                        pl.col("user_id").n_unique().alias("users")
                        - pl.col("user_id").null_count().gt(0).cast(pl.UInt32),
                        pl.col("item_id").n_unique().alias("items"),
                        pl.col("ts").min().alias("ts_min"),
                        pl.col("ts").max().alias("ts_max"),
                    ),
                    lf.group_by("event").len().sort("event"),
                ]
            )
            stats = totals_df.row(0, named=True)
            events_by_type = dict(zip(events["event"].to_list(), events["len"].to_list(), strict=True))
        else:
            stats = {"users": 0, "items": 0, "ts_min": None, "ts_max": None}
            events_by_type = {}
        return {
            "schema_version": SCHEMA_VERSION,
            "source": manifest["source"],
            "fingerprint": manifest["fingerprint"],
            **totals,
            "users": stats["users"],
            "items": stats["items"],
            "events_by_type": events_by_type,
            "ts_min": stats["ts_min"].isoformat() if stats["ts_min"] else None,
            "ts_max": stats["ts_max"].isoformat() if stats["ts_max"] else None,
            "ingests": [
                {
                    k: i.get(k, 0)
                    for k in (
                        "id",
                        "source",
                        "rows_in",
                        "rows_accepted",
                        "rows_rejected",
                        "rows_written",
                        "ids_trimmed",
                        "rejects",
                    )
                }
                for i in ingests
            ],
        }
