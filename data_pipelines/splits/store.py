"""Split folders on disk: write (atomically), load (recomputing when stale), popularity.

Layout: ``DIR/splits/<name>/<seed>-<rule-hash>[-a<algorithm>]/`` holding
``meta.json`` and one parquet file per part (``train``, ``valid``, ``test``, plus ``cold_profile``
and ``cold_test`` where the protocol sets cold users aside), each with the
canonical interaction columns, sorted by user, ts, seq. Algorithm 1 (rows) keeps
the folder name splits had before algorithms were numbered, so those load as
algorithm 1; their ``meta.json`` has no ``algorithm`` and means 1.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from data_pipelines.dataset import Dataset
from data_pipelines.schema import INTERACTIONS, SCHEMA_VERSION, polars_schema, to_arrow, with_version
from data_pipelines.splits.chunked import CHUNK_ROWS, spill, user_ranges
from data_pipelines.splits.prepare import (
    ALGORITHM,
    NATIVE_KEYS,
    ROWS,
    Prepared,
    check_algorithm,
    history_rows,
    unit_counts,
)
from data_pipelines.splits.registry import HISTORY_SPLITS, SPLITS, applicable_for
from data_pipelines.splits.rule import PositivesRule
from parpo_core.durable import atomic_write_json, publish_dir, temp_sibling
from parpo_core.errors import DataError

PARTS = ("train", "valid", "test", "cold_profile", "cold_test")
META = "meta.json"
FORMAT_VERSION = 1


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=polars_schema(INTERACTIONS))


@dataclass
class Split:
    """One split realisation. Every part is a DataFrame of canonical interaction rows
    (positives only, except ``cold_profile``: all of a cold user's earliest events);
    parts a protocol does not produce are empty. ``meta`` is the ``meta.json`` content;
    ``path`` is the folder it lives in (None if it could not be written)."""

    train: pl.DataFrame = field(default_factory=_empty)
    valid: pl.DataFrame = field(default_factory=_empty)
    test: pl.DataFrame = field(default_factory=_empty)
    cold_profile: pl.DataFrame = field(default_factory=_empty)
    cold_test: pl.DataFrame = field(default_factory=_empty)
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    def parts(self) -> dict[str, pl.DataFrame]:
        return {k: getattr(self, k) for k in PARTS if k in self.meta.get("counts", {})}


def split_dir(
    dataset: Dataset, name: str, seed: int = 0, rule: PositivesRule | None = None, algorithm: int = ALGORITHM
) -> Path:
    """``DIR/splits/<name>/<seed>-<rule-hash>`` for algorithm 1, ``...-a<algorithm>`` otherwise."""
    rule = rule or PositivesRule()
    suffix = "" if algorithm == ROWS else f"-a{algorithm}"
    return dataset.root / "splits" / name / f"{seed}-{rule.rule_hash()}{suffix}"


def meta_algorithm(meta: dict[str, Any]) -> int:
    """The split algorithm a ``meta.json`` records; 1 for splits written before it was recorded."""
    return int(meta.get("algorithm", ROWS))


def _check_name(source: str, name: str, algorithm: int) -> None:
    check_algorithm(algorithm)
    SPLITS[name]  # an unknown name is one error line naming the closest
    ok = applicable_for(source)
    if name not in ok:
        raise DataError(f"split '{name}' does not apply to {source} datasets; applicable: {', '.join(ok)}")


def compute_split(
    dataset: Dataset,
    name: str,
    seed: int = 0,
    rule: PositivesRule | None = None,
    algorithm: int = ALGORITHM,
    *,
    prepared: Prepared | None = None,
) -> Split:
    """Cut the split in memory (nothing written). ``prepared`` reuses a shared read of the data."""
    rule = rule or PositivesRule()
    _check_name(dataset.source, name, algorithm)
    p = prepared if prepared is not None else Prepared.of(dataset, seed, rule, algorithm)
    want = (seed, rule.rule_hash(), dataset.fingerprint, algorithm)
    if (p.seed, p.rule.rule_hash(), p.fingerprint, p.algorithm) != want:
        raise ValueError("prepared data is for another seed, rule, dataset or algorithm")
    parts = cut(p, name)
    meta = split_meta(
        dataset,
        name,
        seed,
        rule,
        algorithm,
        {k: v.height for k, v in parts.items()},
        **_users(p, parts),
    )
    return Split(**parts, meta=meta)


def cut(p: Prepared, name: str) -> dict[str, pl.DataFrame]:
    """The parts of split ``name`` of ``p``'s rows, canonical columns in ORDER."""
    raw = SPLITS[name](p)
    return {k: p.canonical(raw[k]) for k in PARTS if k in raw}


def _users(p: Prepared, parts: dict[str, pl.DataFrame]) -> dict[str, int]:
    """``split_meta``'s user counts of ``parts`` (cut from ``p``); they add up over user ranges."""
    return {
        "train_users": parts["train"].get_column("user_id").drop_nulls().n_unique(),
        "cold_users": p.cold_users.len() if "cold_profile" in parts else 0,
    }


def split_meta(
    dataset: Dataset,
    name: str,
    seed: int,
    rule: PositivesRule,
    algorithm: int,
    counts: dict[str, int],
    *,
    train_users: int,
    cold_users: int,
) -> dict[str, Any]:
    """``meta.json`` of a split: what it is, of which data, and its parts' rows and users."""
    return {
        "format_version": FORMAT_VERSION,
        "name": name,
        "seed": seed,
        "algorithm": algorithm,
        "rule": rule.canonical(),
        "rule_hash": rule.rule_hash(),
        "data_fingerprint": dataset.fingerprint,
        "source": dataset.source,
        "schema_version": SCHEMA_VERSION,
        "counts": counts,
        "users": {"train": train_users, "cold": cold_users},
        "created": datetime.now(UTC).isoformat(),
    }


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((path / META).read_text())
    except (OSError, ValueError):
        return None
    if not all((path / f"{k}.parquet").exists() for k in meta.get("counts", {})):
        return None  # a folder someone damaged: treat as missing
    return meta


def _is_current(path: Path, dataset: Dataset, algorithm: int) -> bool:
    return _is_current_fingerprint(path, dataset.fingerprint, algorithm)


def _is_current_fingerprint(path: Path, fingerprint: str, algorithm: int) -> bool:
    meta = _read_meta(path)
    return (
        meta is not None and meta.get("data_fingerprint") == fingerprint and meta_algorithm(meta) == algorithm
    )


def save_split(split: Split, target: Path) -> Path:
    """Publish ``split`` at ``target``: build a temp sibling folder, fsync, rename.

    If ``target`` already holds a split of the same data fingerprint (a
    concurrent writer won), that one is kept. A stale ``target`` is swapped
    out and deleted.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(target)
    tmp.mkdir()
    try:
        for k, df in split.parts().items():
            pq.write_table(to_arrow(df, INTERACTIONS), tmp / f"{k}.parquet", compression="zstd")
        _publish(tmp, target, split.meta)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    split.path = target
    return target


def _publish(tmp: Path, target: Path, meta: dict[str, Any]) -> None:
    """Add ``meta.json`` to ``tmp`` (its parts written) and rename it to ``target``, unless
    ``target`` already holds a split of the same data (a concurrent writer won: kept). A stale
    ``target`` is swapped out and deleted."""
    fingerprint, algorithm = meta["data_fingerprint"], meta_algorithm(meta)
    atomic_write_json(tmp / META, meta)
    if not _is_current_fingerprint(target, fingerprint, algorithm):
        try:
            publish_dir(tmp, target, replace=True)
        except OSError:
            # Another writer published between our check and rename; keep theirs if current.
            if not _is_current_fingerprint(target, fingerprint, algorithm):
                raise


def write_split(
    dataset: Dataset,
    name: str,
    seed: int = 0,
    rule: PositivesRule | None = None,
    algorithm: int = ALGORITHM,
    *,
    prepared: Prepared | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> Path:
    """Write ``name`` (one realisation: ``seed``, ``rule``, ``algorithm``) under the dataset;
    returns its folder. A history split of more than ``chunk_rows`` rows is cut by user
    range (``data_pipelines.splits.chunked``) unless ``prepared`` is given.

    A folder already current for the dataset's fingerprint is kept as is. Raises
    ``DataError`` for an unknown split or algorithm, or a split that does not apply to the source.
    """
    rule = rule or PositivesRule()
    _check_name(dataset.source, name, algorithm)
    target = split_dir(dataset, name, seed, rule, algorithm)
    if _is_current(target, dataset, algorithm):
        return target
    if prepared is None and name in HISTORY_SPLITS:
        bounds = user_ranges(dataset, chunk_rows)
        if bounds is not None:
            _write_ranges(dataset, [name], seed, rule, algorithm, bounds)
            return target
    return save_split(compute_split(dataset, name, seed, rule, algorithm, prepared=prepared), target)


def write_all(
    dataset: Dataset,
    seed: int = 0,
    rule: PositivesRule | None = None,
    algorithm: int = ALGORITHM,
    *,
    chunk_rows: int = CHUNK_ROWS,
) -> dict[str, Path]:
    """Write every split that applies to the dataset's source; the data are read once (a
    log of more than ``chunk_rows`` rows: once for all history splits, by user range)."""
    rule = rule or PositivesRule()
    check_algorithm(algorithm)
    names = applicable_for(dataset.source)
    todo = [
        n for n in names if not _is_current(split_dir(dataset, n, seed, rule, algorithm), dataset, algorithm)
    ]
    ranged = [n for n in todo if n in HISTORY_SPLITS]
    bounds = user_ranges(dataset, chunk_rows) if ranged else None
    if bounds is not None:
        _write_ranges(dataset, ranged, seed, rule, algorithm, bounds)
        todo = [n for n in todo if n not in ranged]
    prepared = Prepared.of(dataset, seed, rule, algorithm) if todo else None
    return {n: write_split(dataset, n, seed, rule, algorithm, prepared=prepared) for n in names}


def _write_ranges(
    dataset: Dataset, names: list[str], seed: int, rule: PositivesRule, algorithm: int, bounds: pl.Series
) -> None:
    """Write the history splits ``names`` range by range (``chunked``): spill the ranges,
    count the units per item over all of them, then cut each range and append its parts."""
    targets = {n: split_dir(dataset, n, seed, rule, algorithm) for n in names}
    ranges = temp_sibling(dataset.root / "splits" / "ranges")
    tmps = {n: temp_sibling(t) for n, t in targets.items()}
    schema = with_version(INTERACTIONS)
    writers: dict[tuple[str, str], pq.ParquetWriter] = {}
    rows: dict[str, dict[str, int]] = {n: {} for n in names}
    users = {n: {"train_users": 0, "cold_users": 0} for n in names}
    try:
        ranges.mkdir(parents=True)
        for t in tmps.values():
            t.parent.mkdir(parents=True, exist_ok=True)
            t.mkdir()
        files = spill(dataset, bounds, ranges)
        counts = _unit_counts(dataset, files, rule, algorithm)
        for f in files:
            p = Prepared.of_range(dataset, f, seed, rule, algorithm, counts)
            for n in names:
                parts = cut(p, n)
                for k, df in parts.items():
                    if (n, k) not in writers:
                        writers[n, k] = pq.ParquetWriter(tmps[n] / f"{k}.parquet", schema, compression="zstd")
                    writers[n, k].write_table(to_arrow(df, INTERACTIONS))
                    rows[n][k] = rows[n].get(k, 0) + df.height
                for key, v in _users(p, parts).items():
                    users[n][key] += v
        while writers:
            writers.popitem()[1].close()
        for n in names:
            counts_n = {k: rows[n][k] for k in PARTS if k in rows[n]}
            meta = split_meta(dataset, n, seed, rule, algorithm, counts_n, **users[n])
            _publish(tmps[n], targets[n], meta)
    finally:
        for w in writers.values():
            w.close()
        for d in (ranges, *tmps.values()):
            shutil.rmtree(d, ignore_errors=True)


def _unit_counts(dataset: Dataset, files: list[Path], rule: PositivesRule, algorithm: int) -> pl.DataFrame:
    """``unit_counts`` over every range file: the item counts ``intervened`` weighs units by."""
    cols = ["user_id", "item_id", "event", "value", *NATIVE_KEYS.get(dataset.source, [])]
    per_range = []
    for f in files:
        df = pl.read_parquet(f, columns=cols).with_columns(rule.is_positive().fill_null(False).alias("__pos"))
        per_range.append(unit_counts(history_rows(df, dataset.source).filter("__pos"), algorithm))
    return pl.concat(per_range).group_by("item_id").agg(pl.col("count").sum())


def read_split(path: Path) -> Split:
    """Read a split folder as written by ``save_split``."""
    meta = _read_meta(path)
    if meta is None:
        raise DataError(f"{path}: not a split folder (missing meta.json or parts); delete it to recompute")
    parts = {k: pl.read_parquet(path / f"{k}.parquet") for k in meta["counts"]}
    return Split(**parts, meta=meta, path=path)


def load_split(
    dataset: Dataset,
    name: str,
    seed: int = 0,
    rule: PositivesRule | None = None,
    compute_missing: bool = True,
    algorithm: int = ALGORITHM,
) -> Split:
    """The split ``name`` for this dataset, seed, rule and algorithm.

    Read from disk when its ``data_fingerprint`` matches the dataset's; otherwise
    (missing, stale, damaged) computed on the fly and written, or, where the
    dataset folder is not writable, returned from memory (``path`` None).
    With ``compute_missing=False`` a missing or stale split is a ``DataError``.
    """
    rule = rule or PositivesRule()
    _check_name(dataset.source, name, algorithm)
    target = split_dir(dataset, name, seed, rule, algorithm)
    if _is_current(target, dataset, algorithm):
        return read_split(target)
    if not compute_missing:
        if not target.exists():
            state = "missing"
        elif _read_meta(target) is None:
            state = "damaged (meta.json or a part is missing)"
        else:
            state = "stale (written for other data)"
        raise DataError(f"{target}: split is {state}; recompute it (compute_missing=True)")
    bounds = user_ranges(dataset) if name in HISTORY_SPLITS else None
    if bounds is not None:  # too large to cut at once
        try:
            _write_ranges(dataset, [name], seed, rule, algorithm, bounds)
            return read_split(target)
        except PermissionError:
            pass  # a read-only dataset folder: cut in memory, as below
    split = compute_split(dataset, name, seed, rule, algorithm)
    try:
        save_split(split, target)
    except PermissionError:
        split.path = None
    return split


def train_popularity(split: Split) -> pl.DataFrame:
    """item_id, count: positives per item in the split's *train* part only (what a model
    may see), most popular first (ties by item_id)."""
    return (
        split.train.group_by("item_id")
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .sort(["count", "item_id"], descending=[True, False])
    )
