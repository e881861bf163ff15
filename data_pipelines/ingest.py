"""Ingest a source into a canonical dataset folder, as one transaction.

Pass 1 streams the input in chunks of whole lines: adapter transform, common
checks, quarantine of failing lines, exact dedupe of records (128-bit keys of
the raw text, kept for later appends), staging to Arrow IPC bucketed by user. Pass 2 reads one bucket at
a time, assigns ``seq`` (per user, by ts then input order, after the user's
existing events) and writes the final partitions. Id maps, side tables, the
summary and the manifest are then published together (see ``transaction``).
Memory grows with the dedupe keys and id maps, and with one bucket (plus the
Arrow copy of the one before, being written).

Two cores are used where the work allows (``prefetch``): the next chunk is read,
parsed and transformed while the current one is checked, deduplicated and staged,
and a partition is written while the next bucket's ``seq`` is assigned.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from data_pipelines import idmaps
from data_pipelines.adapters.base import ROW_COLUMNS, FileSpec, Source
from data_pipelines.dataset import Dataset, fingerprint_of
from data_pipelines.dedupe import KeySet, first_new
from data_pipelines.idrule import TRIMMED, apply_id_rule, check_id_rule
from data_pipelines.lines import LINE, Chunk
from data_pipelines.prefetch import prefetch
from data_pipelines.schema import (
    CONTEXTS,
    IDMAP,
    INTERACTIONS,
    ITEMS,
    OBSERVATION_PROPENSITIES,
    REJECTS,
    SCHEMA_VERSION,
    SEQ_KEY,
    USERS,
    to_arrow,
)
from data_pipelines.transaction import Transaction, read_manifest, recover
from data_pipelines.validate import REASON, common_checks, failing_lines
from parpo_core.durable import sha256_file
from parpo_core.errors import DataError
from parpo_core.limits import ID_RULE_VERSION

BUCKET_BYTES = 96 << 20  # input bytes per seq bucket: bounds pass-2 memory
DUPLICATE = "exact duplicate of an earlier record"
APPENDABLE_SOURCES = {"parpo-events"}  # may be appended to a dataset of another source


#: Interactions columns given a parquet dictionary: their values repeat across a partition (``ts``
#: too: real logs have many events per second). Not ``user_id`` (a user's rows are adjacent, so
#: zstd packs them without one), ``session_id`` or ``request_id`` (adjacent too, and nearly one
#: value per few rows): for those the dictionary cost time and made the file larger.
INTERACTIONS_DICTIONARY = [
    "item_id",
    "ts",
    "seq",
    "event",
    "value",
    "category",
    "position",
    "propensity",
    "logging_policy",
]


def write_parquet(df: pl.DataFrame, path: Path, schema) -> str:
    """Write a canonical table (schema version in metadata); returns its sha256."""
    return write_table(to_arrow(df, schema), path)


def write_table(table: pa.Table, path: Path, dictionary: bool | list[str] = True) -> str:
    """Write an Arrow table conformed by ``to_arrow`` as zstd parquet; returns its sha256.

    ``dictionary``: dictionary-encode every column, or only the columns named."""
    pq.write_table(table, path, compression="zstd", use_dictionary=dictionary)
    return sha256_file(path)


def ingest(
    source: Source,
    out: Path,
    *,
    progress: Callable[[int], None] | None = None,
    now: datetime | None = None,
    share_idmaps_with: Dataset | None = None,
) -> dict[str, Any]:
    """Ingest ``source`` into ``out``; returns the new summary (``summary.json``).

    Re-ingesting files already ingested is a no-op (same sha256), reported as
    ``{"noop": true, ...}``. ``share_idmaps_with``: a new dataset starts from that
    dataset's id maps (e.g. a held-out test set indexed like its training data).
    """
    out.mkdir(parents=True, exist_ok=True)
    recover(out)
    manifest = read_manifest(out)
    if manifest and manifest["source"] != source.name and source.name not in APPENDABLE_SOURCES:
        raise DataError(
            f"{out} holds a '{manifest['source']}' dataset; one source per dataset folder "
            f"(use a new --out for '{source.name}')"
        )
    files = [
        {"path": str(f.path.resolve()), "sha256": sha256_file(f.path), "bytes": f.path.stat().st_size}
        for f in source.files
    ]
    seen = {f["sha256"] for i in (manifest or {}).get("ingests", []) for f in i["files"]}
    if files and all(f["sha256"] in seen for f in files):
        summary = Dataset(out).summary()
        return {**summary, "noop": True}
    for ds in (Dataset(out) if manifest else None, share_idmaps_with):
        if ds is not None:
            check_id_rule(ds)

    txn = Transaction(out)
    try:
        return _ingest(
            source, out, txn, manifest, files, progress, now or datetime.now(UTC), share_idmaps_with
        )
    except BaseException:
        txn.abort()
        raise


def _ingest(
    source: Source,
    out: Path,
    txn: Transaction,
    manifest: dict[str, Any] | None,
    files: list[dict[str, Any]],
    progress: Callable[[int], None] | None,
    now: datetime,
    share_idmaps_with: Dataset | None,
) -> dict[str, Any]:
    """Pass 1 (validate, dedupe, stage by key bucket), pass 2 (``seq`` per key, partitions),
    then the side tables, the manifest and the commit."""
    started = time.time()
    existing = Dataset(out) if manifest else None
    n_buckets = max(1, math.ceil(sum(f["bytes"] for f in files) / BUCKET_BYTES))
    seen_keys = KeySet(existing.dedupe_keys() if existing else None)
    staged = _stage(source, txn, seen_keys, n_buckets, common_checks(now), progress)
    next_seq = (
        existing.next_seq() if existing else pl.DataFrame(schema={"__key": pl.String, "__base": pl.Int64})
    )
    partitions = _write_partitions(txn, n_buckets, next_seq)
    keys_rel = f"state/dedupe-{txn.id}.parquet"
    seen_keys.to_frame().write_parquet(txn.path(keys_rel))
    rejects_rel = f"rejects/{txn.id}.parquet"
    write_parquet(staged.rejects, txn.path(rejects_rel), REJECTS)
    tables = _side_tables(
        source,
        existing,
        existing or share_idmaps_with,
        pl.concat(staged.users).unique("id", keep="first", maintain_order=True),
        pl.concat(staged.items).unique("id", keep="first", maintain_order=True),
        pl.concat(staged.item_cats).unique("item_id", keep="last", maintain_order=True),
        staged.contexts,
        txn,
    )
    ingest_record = {
        "id": txn.id,
        "source": source.name,
        "files": files,
        "started": datetime.fromtimestamp(started, UTC).isoformat(),
        "seconds": round(time.time() - started, 3),
        "rows_in": staged.rows_in,
        "rows_accepted": staged.rows_in - staged.rows_rejected,
        "rows_rejected": staged.rows_rejected,
        "rows_written": sum(p["rows"] for p in partitions),
        "ids_trimmed": staged.ids_trimmed,
        "rejects": rejects_rel,
        "dedupe_keys": keys_rel,
        "notes": source.notes,
    }
    new_manifest = _next_manifest(manifest, source.name, ingest_record, partitions, tables)
    new = {p["path"] for p in partitions}
    paths = [(txn.dir if p["path"] in new else out) / p["path"] for p in new_manifest["partitions"]]
    summary = Dataset.summarize(new_manifest, paths)
    txn.path("summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    txn.commit(new_manifest)
    return summary


@dataclass
class Staged:
    """What pass 1 learnt besides the staged rows: accounting, rejects and the ids seen."""

    rows_in: int = 0
    rows_rejected: int = 0
    ids_trimmed: int = 0  # ids of accepted rows trimmed of white space at their ends
    rejects: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=REJECTS_POLARS))
    # Per-chunk distinct ids (first appearance order) and last categories, merged once at the end.
    users: list[pl.DataFrame] = field(default_factory=lambda: [pl.DataFrame(schema={"id": pl.String})])
    items: list[pl.DataFrame] = field(default_factory=lambda: [pl.DataFrame(schema={"id": pl.String})])
    item_cats: list[pl.DataFrame] = field(
        default_factory=lambda: [pl.DataFrame(schema={"item_id": pl.String, "category": pl.String})]
    )
    contexts: list[pl.DataFrame] = field(default_factory=list)


def _stage(
    source: Source,
    txn: Transaction,
    seen_keys: KeySet,
    n_buckets: int,
    checks: list[tuple[pl.Expr, pl.Expr]],
    progress: Callable[[int], None] | None,
) -> Staged:
    """Pass 1, chunk by chunk: transform, validate, drop exact duplicates of earlier lines,
    stage the good rows as Arrow files by key bucket in the transaction's scratch folder."""
    stage = txn.scratch("stage")
    out = Staged()
    rejects: list[pl.DataFrame] = []
    n_chunk = 0
    for spec in source.files:
        # Reading, parsing and transforming chunk i+1 overlaps the rest of chunk i (about as long);
        # closed on an error too, so the worker stops and the source file is let go at once.
        with contextlib.closing(prefetch(_transformed(spec))) as chunks:
            for i_chunk, (chunk, rows) in enumerate(chunks):
                out.rows_in += chunk.n_lines
                rows, id_rule = apply_id_rule(rows)
                bad = failing_lines(rows, checks + id_rule)
                # Exact dedupe of records: a 128-bit key (two seeded 64-bit hashes) of the raw line,
                # against earlier lines of this ingest and every earlier ingest (state/dedupe-*).
                keys = (
                    chunk.fields.filter(~pl.col(LINE).is_in(bad[LINE].implode()))
                    .select(LINE, __r=(pl.lit(spec.scope + "\x1f") + chunk.raw) if spec.scope else chunk.raw)
                    .select(LINE, h1=pl.col("__r").hash(0x9E3779B9), h2=pl.col("__r").hash(0x85EBCA6B))
                )
                h1, h2 = keys["h1"].to_numpy(), keys["h2"].to_numpy()
                new = first_new(h1, h2, seen_keys)
                dup_lines = keys.filter(~pl.Series(new)).select(LINE)
                bad = pl.concat([bad, dup_lines.with_columns(pl.lit(DUPLICATE).alias(REASON))])
                rows = rows.filter(~pl.col(LINE).is_in(bad[LINE].implode()))
                if TRIMMED in rows.columns:
                    out.ids_trimmed += int(rows[TRIMMED].sum())
                seen_keys.add(h1[new], h2[new])
                rejected = pl.concat(
                    [
                        chunk.rejects,
                        chunk.fields.join(bad, on=LINE).select(
                            pl.col(LINE).alias("line"),
                            chunk.raw.alias("raw"),
                            pl.col(REASON).alias("reason"),
                            pl.lit(None, pl.String).alias("raw_base64"),
                        ),
                    ]
                ).with_columns(pl.lit(txn.id).alias("ingest_id"), pl.lit(str(spec.path)).alias("file"))
                if i_chunk == 0 and rows.height == 0 and not dup_lines.height and rejected.height:
                    first = rejected.sort("line").row(0, named=True)
                    raise DataError(
                        f"{spec.path}: does not look like '{source.name}' input: none of its first "
                        f"{chunk.n_lines:,} lines is a valid record (line {first['line']}: {first['reason']})"
                    )
                rejects.append(rejected)
                out.rows_rejected += rejected.height
                _collect_ids(out, rows)
                # Staged rows are in input order, which is all pass 2 needs of ``__line`` and ``__ord``.
                staged = rows.select(*ROW_COLUMNS, (SEQ_KEY.hash(7) % n_buckets).alias("__bucket"))
                for (b,), part in staged.partition_by("__bucket", as_dict=True).items():
                    part.drop("__bucket").write_ipc(stage / f"b{b}-c{n_chunk:08d}.arrow")
                n_chunk += 1
                if progress:
                    progress(chunk.n_lines)
    if rejects:
        out.rejects = pl.concat(rejects)
    return out


def _transformed(spec: FileSpec) -> Iterator[tuple[Chunk, pl.DataFrame]]:
    """A file's chunks, each with its canonical rows (the adapter's transform of its fields)."""
    for chunk in spec.chunks():
        yield chunk, spec.transform(chunk.fields)


def _collect_ids(out: Staged, rows: pl.DataFrame) -> None:
    """Remember a chunk's users, items, item categories and request contexts."""
    out.users.append(rows.select(pl.col("user_id").alias("id")).drop_nulls().unique(maintain_order=True))
    # One group-by gives both the items (first appearance order) and their last category.
    items = rows.group_by("item_id", maintain_order=True).agg(pl.col("category").drop_nulls().last())
    out.items.append(items.select(pl.col("item_id").alias("id")))
    out.item_cats.append(items.filter(pl.col("category").is_not_null()))
    if "__context" in rows.columns:
        out.contexts.append(
            rows.filter(pl.col("__context").is_not_null())
            .select("request_id", pl.col("__context").alias("features"))
            .unique("request_id", keep="first", maintain_order=True)
        )


def _write_partitions(txn: Transaction, n_buckets: int, next_seq: pl.DataFrame) -> list[dict[str, Any]]:
    """Pass 2: ``seq`` per key, one bucket at a time, each bucket one interactions partition.

    A bucket's parquet write (pyarrow, one thread) overlaps the next bucket's ``seq``. At most
    one write is pending, and it frees its polars frame once converted to Arrow, so pass 2
    holds about one bucket more than it would without the overlap."""
    stage = txn.scratch("stage")
    partitions = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="partition-write") as writer:
        pending: Future | None = None
        for b in range(n_buckets):
            paths = sorted(stage.glob(f"b{b}-c*.arrow"))
            if not paths:
                continue
            df = _assign_seq(pl.concat([pl.read_ipc(p) for p in paths]), next_seq)
            if pending is not None:
                partitions.append(pending.result())
            pending = writer.submit(_write_partition, txn, b, [df])
            del df
        if pending is not None:
            partitions.append(pending.result())
    return partitions


def _write_partition(txn: Transaction, bucket: int, frames: list[pl.DataFrame]) -> dict[str, Any]:
    """Write one bucket; ``frames`` holds its frame, popped so that no one else keeps it alive."""
    df = frames.pop()
    rows, table = df.height, to_arrow(df, INTERACTIONS)
    del df
    rel = f"interactions/part-{txn.id}-{bucket:04d}.parquet"
    return {"path": rel, "rows": rows, "sha256": write_table(table, txn.path(rel), INTERACTIONS_DICTIONARY)}


def _next_manifest(
    manifest: dict[str, Any] | None,
    source: str,
    ingest_record: dict[str, Any],
    partitions: list[dict[str, Any]],
    tables: dict[str, Any],
) -> dict[str, Any]:
    """The manifest after this ingest: its record and partitions appended, tables replaced,
    fingerprint recomputed."""
    old = manifest or {
        "source": source,
        "created": datetime.now(UTC).isoformat(),
        "ingests": [],
        "partitions": [],
    }
    new = {
        "schema_version": SCHEMA_VERSION,
        "id_rule_version": ID_RULE_VERSION,
        "source": old["source"],
        "created": old["created"],
        "updated": datetime.now(UTC).isoformat(),
        "ingests": [*old["ingests"], ingest_record],
        "partitions": [*old["partitions"], *partitions],
        "tables": tables,
    }
    new["fingerprint"] = fingerprint_of(new)
    return new


REJECTS_POLARS = {
    "line": pl.Int64,
    "raw": pl.String,
    "reason": pl.String,
    "raw_base64": pl.String,
    "ingest_id": pl.String,
    "file": pl.String,
}


def _assign_seq(df: pl.DataFrame, next_seq: pl.DataFrame) -> pl.DataFrame:
    """``seq`` per key (user, or request): by ts (nulls last), then input order, after ``__base``.

    ``df`` is in input order. A stable sort by a 64-bit hash of the key groups each key's
    rows (a numeric sort, far cheaper than sorting strings); only when some key's ts go
    backwards in input order is the bucket also sorted by ts (logs usually arrive in time
    order, so this is rare). Each key's rows are then one run, numbered from the run's
    start; only if two keys share a hash (their rows interleave) is ``seq`` counted per key
    with ``over``, a string group-by that cost ten times the runs.
    """
    return _seq_by_hash(
        df.with_columns(SEQ_KEY).with_columns(pl.col("__key").hash(11).alias("__h")), next_seq
    )


def _seq_by_hash(df: pl.DataFrame, next_seq: pl.DataFrame) -> pl.DataFrame:
    """``_assign_seq`` for ``df`` with its key (``__key``) and the key's hash (``__h``)."""
    df = df.sort("__h", maintain_order=True)
    same = pl.col("__key") == pl.col("__key").shift(1)
    prev = pl.col("ts").shift(1)
    backwards = same & ((prev.is_null() & pl.col("ts").is_not_null()) | (pl.col("ts") < prev)).fill_null(
        False
    )
    collision = (pl.col("__h") == pl.col("__h").shift(1)) & ~same
    backwards_any, collision_any = df.select(backwards.any(), collision.any()).row(0)
    if backwards_any:
        df = df.sort(["__h", "ts"], nulls_last=True, maintain_order=True)
    if collision_any:
        rank = pl.int_range(pl.len(), dtype=pl.Int64).over("__key")
    else:
        i = pl.int_range(pl.len(), dtype=pl.Int64)
        rank = i - pl.when(~same.fill_null(False)).then(i).forward_fill()
    if next_seq.height:
        df = df.join(next_seq, on="__key", how="left", maintain_order="left")
        rank = pl.col("__base").fill_null(0) + rank
    return df.with_columns(rank.alias("seq"))


def _merge_table(old: pl.DataFrame | None, new: pl.DataFrame | None, key: str) -> pl.DataFrame | None:
    """Union by ``key``; for each column the newest non-null value wins."""
    frames = [f for f in (old, new) if f is not None and f.height]
    if not frames:
        return old if old is not None else new
    if len(frames) == 1:
        return frames[0]
    both = pl.concat(frames, how="diagonal_relaxed")
    cols = [c for c in both.columns if c != key]
    return both.group_by(key, maintain_order=True).agg([pl.col(c).drop_nulls().last() for c in cols])


def _side_tables(
    source, existing, idmap_base, users_seen, items_seen, item_cats, contexts, txn
) -> dict[str, Any]:
    """Items, users, contexts, observation propensities and the id maps, staged in ``txn``."""
    tables: dict[str, Any] = dict(existing.manifest["tables"]) if existing else {}

    observed_items = items_seen.rename({"id": "item_id"}).join(item_cats, on="item_id", how="left")
    items = _merge_table(existing.items() if existing else None, observed_items, "item_id")
    items = _merge_table(items, source.items, "item_id")
    items = items.with_columns(
        pl.col("attributes").fill_null(pl.lit([], dtype=pl.List(pl.String)))
        if "attributes" in items.columns
        else pl.lit([], dtype=pl.List(pl.String)).alias("attributes")
    )
    for c, t in (("category", pl.String), ("price", pl.Float64)):
        if c not in items.columns:
            items = items.with_columns(pl.lit(None, dtype=t).alias(c))
    observed_users = users_seen.rename({"id": "user_id"})
    users = _merge_table(existing.users() if existing else None, source.users, "user_id")
    users = _merge_table(observed_users, users, "user_id") if users is not None else observed_users
    if "features" not in users.columns:
        users = users.with_columns(pl.lit(None).alias("features"))
    users = users.with_columns(
        pl.col("features").fill_null(
            pl.lit([], dtype=pl.List(pl.Struct({"key": pl.String, "value": pl.String})))
        )
    )
    ctx = pl.concat(contexts) if contexts else None
    ctx = _merge_table(existing.contexts() if existing else None, ctx, "request_id")
    if ctx is None:
        ctx = pl.DataFrame(
            schema={
                "request_id": pl.String,
                "features": pl.List(pl.Struct({"key": pl.String, "value": pl.String})),
            }
        )
    obs_frames = [
        f
        for f in (
            existing.table("observation_propensities") if existing else None,
            source.observation_propensities,
        )
        if f is not None
    ]
    obs = (
        pl.concat(obs_frames).unique(["user_id", "item_id"], keep="last", maintain_order=True)
        if obs_frames
        else None
    )

    # Id maps: interaction users/items first (order of first appearance), then catalogue-only ones.
    old_users = idmap_base.idmap("users") if idmap_base else idmaps.empty()
    old_items = idmap_base.idmap("items") if idmap_base else idmaps.empty()
    user_map = idmaps.extend(old_users, pl.concat([users_seen["id"], users["user_id"]]))
    item_map = idmaps.extend(old_items, pl.concat([items_seen["id"], items["item_id"]]))

    for name, df, schema in (
        ("items", items, ITEMS),
        ("users", users, USERS),
        ("contexts", ctx, CONTEXTS),
        ("idmaps/users", user_map, IDMAP),
        ("idmaps/items", item_map, IDMAP),
    ):
        rel = f"{name}.parquet"
        tables[name] = {"path": rel, "rows": df.height, "sha256": write_parquet(df, txn.path(rel), schema)}
    if obs is not None and obs.height:
        rel = "observation_propensities.parquet"
        tables["observation_propensities"] = {
            "path": rel,
            "rows": obs.height,
            "sha256": write_parquet(obs, txn.path(rel), OBSERVATION_PROPENSITIES),
        }
    return tables
