"""Put a generated world on disk: canonical dataset, uniform_test, truth/ (and a CSV for benchmarks).

The logs go through the real ingest (manifest, id maps, summary, rejects), so a
synthetic dataset is read exactly like an ingested shop log.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from data_pipelines.adapters import canonical
from data_pipelines.adapters.base import ROW_COLUMNS
from data_pipelines.dataset import Dataset
from data_pipelines.ingest import ingest
from data_pipelines.synth.config import SynthConfig
from data_pipelines.synth.drift import ContinueConfig, continue_world, load_state
from data_pipelines.synth.generate import generate_logs, play, streams
from data_pipelines.synth.truth import (
    FrameWriter,
    all_pairs,
    distinct,
    observed_pairs,
    write_truth,
    write_truth_parts,
)
from data_pipelines.synth.world import World, build_world
from parpo_core.durable import atomic_write_with, temp_sibling
from parpo_core.errors import DataError
from parpo_core.limits import TS_FUTURE_SLACK, TS_MIN

SOURCE = "synthetic"
#: Columns of the benchmark CSV: what a shop's export typically carries.
CSV_COLUMNS: tuple[str, ...] = (
    "user_id",
    "item_id",
    "ts",
    "event",
    "value",
    "category",
    "session_id",
    "position",
)


def write(
    config: SynthConfig | None, out: str | Path, *, overwrite: bool = False, splits: bool = True
) -> dict[str, Any]:
    """Generate and write a synthetic dataset to ``out``; returns its ingest summary, extended.

    ``out`` becomes a canonical dataset (source ``synthetic``) with ``uniform_test/``
    (a canonical dataset sharing its id maps) and ``truth/`` (written last: its
    ``meta.json`` marks a complete write). ``out`` must be empty or absent;
    ``overwrite`` replaces an earlier synthetic dataset (one with ``truth/meta.json``).
    ``splits``: also write every applicable split with seed 0 and the default rule.

    Each round's rows go to parquet files in a hidden staging folder beside ``out`` as the
    round ends (removed when done, failed or not), then through the ingest, which reads them
    in chunks: the generation's memory is bounded by one round, not by the log (the ingest's
    pass 2 and the splits still grow with the rows). The rows are those of ``generate(config)``.

    The summary is the main dataset's ``summary.json`` plus ``uniform_test`` (its
    summary), ``truth`` (files and row counts) and ``synth`` (seed, config digest,
    statistics, splits note, seconds).
    """
    cfg = config or SynthConfig()
    out = Path(out)
    _check_time_range(cfg, cfg.rounds)
    _claim(out, overwrite)
    started = time.perf_counter()
    st = streams(cfg.seed)
    world = build_world(cfg, st.users, st.items)
    items, users = world.items_frame(), world.users_frame()
    note = f"data_pipelines.synth seed={cfg.seed} config_digest={cfg.digest()}"
    with _staging(out) as stage:
        sink = Staging(stage, world)
        try:
            logs = play(cfg, world, st, sink)
        finally:
            sink.close()
        main, uniform = _ingest_logs(out, stage, items, users, items, users, note)
        meta = write_truth_parts(
            out / "truth", cfg, world, logs, sink.impressions.path, sink.observed_pairs()
        )
    synth = {"seed": cfg.seed, "config_digest": cfg.digest(), "stats": logs.stats}
    return _finish(out, main, uniform, meta, synth, splits=splits, started=started)


class Staging:
    """A ``Sink`` (``generate.play``) that appends each round's frames to parquet files in ``folder``:
    ``interactions.parquet``, ``uniform_test.parquet`` and the truth's ``impressions.parquet``; it
    keeps the distinct (user, item) pairs shown when ``truth/`` stores only the observed ones."""

    wants_impressions = True

    def __init__(self, folder: Path, world: World) -> None:
        self.world = world
        self.rows = {"main": FrameWriter(folder / "interactions.parquet")}
        self.rows["uniform"] = FrameWriter(folder / "uniform_test.parquet")
        self.impressions = FrameWriter(folder / "impressions.parquet")
        self.pairs: list[np.ndarray] | None = None if all_pairs(world) else []

    def add(self, split: str, rows: pl.DataFrame, impressions: pl.DataFrame | None) -> None:
        if impressions is None:  # never: ``wants_impressions`` asks ``play`` for them
            raise ValueError("Staging stores the truth's impressions; play() gave none")
        self.rows[split].write(rows)
        self.impressions.write(impressions)
        if self.pairs is not None:
            self.pairs.append(observed_pairs(self.world, impressions))

    def observed_pairs(self) -> np.ndarray | None:
        """``truth.observed_pairs`` of every impression added; None when ``truth/`` holds all pairs."""
        return None if self.pairs is None else distinct(np.concatenate(self.pairs))

    def close(self) -> None:
        for w in (*self.rows.values(), self.impressions):
            w.close()


@contextlib.contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A hidden folder beside ``out`` (same filesystem: staged files move into ``out`` by rename),
    removed on leaving, on success or failure."""
    out.parent.mkdir(parents=True, exist_ok=True)
    folder = temp_sibling(out, ".staging")
    folder.mkdir()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def write_continuation(
    root: str | Path, out: str | Path, spec: ContinueConfig, *, splits: bool = True
) -> dict[str, Any]:
    """Continue the synthetic dataset ``root`` into the new folder ``out`` (``data_pipelines.synth.drift``).

    ``out`` starts as a copy of ``root``'s dataset files (rows, side tables, id maps, rejects,
    dedupe state; not its splits or uniform_test); the new rounds are then appended by the real
    ingest (id maps extended), ``uniform_test/`` is the uniform test after the new rounds, and
    ``truth/`` covers every user and item (written last). ``root`` is only read. Returns the
    summary as ``write`` does, with ``synth.continuation`` (the record also in truth/meta.json).
    The continuation is built in memory (``continue_world``).
    """
    root, out = Path(root), Path(out)
    state = load_state(root)
    a, b = root.resolve(), out.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise DataError(f"{out}: the continuation needs a folder outside {root} (and not holding it)")
    _check_time_range(state.config, state.rounds + spec.rounds)
    _claim(out, overwrite=False)
    started = time.perf_counter()
    new, whole = continue_world(state, spec)
    record = whole.continuations[-1]
    cfg = state.config
    old_users, old_items = state.world.user_ids.implode(), state.world.item_ids.implode()
    note = (
        f"data_pipelines.synth continuation {record['continuation']} seed={record['seed']} "
        f"config_digest={cfg.digest()}"
    )
    _copy_dataset(root, out)
    items = new.items.filter(~pl.col("item_id").is_in(old_items))  # the side rows this ingest adds
    users = new.users.filter(~pl.col("user_id").is_in(old_users))
    with _staging(out) as stage:
        new.interactions.write_parquet(stage / "interactions.parquet")
        new.uniform.write_parquet(stage / "uniform_test.parquet")
        main, uniform = _ingest_logs(out, stage, items, users, new.items, new.users, note)
    meta = write_truth(whole, out / "truth")
    synth = {
        "seed": record["seed"],
        "config_digest": cfg.digest(),
        "stats": new.stats,
        "continuation": record,
    }
    return _finish(out, main, uniform, meta, synth, splits=splits, started=started)


def _ingest_logs(
    out: Path,
    stage: Path,
    items: pl.DataFrame,
    users: pl.DataFrame,
    all_items: pl.DataFrame,
    all_users: pl.DataFrame,
    note: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ingest ``stage/interactions.parquet`` (with the side rows ``items`` and ``users`` it adds) into
    ``out`` and ``stage/uniform_test.parquet`` into ``out/uniform_test`` (with the side tables
    ``all_items`` and ``all_users``, sharing ``out``'s id maps); returns both summaries."""
    main = _ingest(stage / "interactions.parquet", out, items, users, note)
    uniform = _ingest(
        stage / "uniform_test.parquet", out / "uniform_test", all_items, all_users, note, share=Dataset(out)
    )
    return main, uniform


def _finish(
    out: Path,
    main: dict[str, Any],
    uniform: dict[str, Any],
    truth: dict[str, Any],
    synth: dict[str, Any],
    *,
    splits: bool,
    started: float,
) -> dict[str, Any]:
    """Write the splits; returns the summary ``write`` and ``write_continuation`` document
    (``synth`` completed with the splits note and the seconds)."""
    synth["splits"] = _splits(out) if splits else "not requested"
    synth["seconds"] = round(time.perf_counter() - started, 3)
    return {**main, "uniform_test": uniform, "truth": truth["files"], "synth": synth}


def _copy_dataset(src: Path, dest: Path) -> None:
    """Copy the files ``src``'s manifest publishes (and the manifest and summary) into ``dest``."""
    m = Dataset(src).manifest
    rels = ["manifest.json", "summary.json"]
    rels += [p["path"] for p in m["partitions"]] + [t["path"] for t in m["tables"].values()]
    rels += [i[k] for i in m["ingests"] for k in ("rejects", "dedupe_keys")]
    for rel in rels:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)


def _check_time_range(cfg: SynthConfig, rounds: int) -> None:
    """The ingest quarantines timestamps outside [TS_MIN, now + slack]: refuse logs of ``rounds``
    rounds and a uniform test day that would cross it, up front."""
    end = cfg.start + timedelta(seconds=(rounds + 1) * cfg.round_seconds)
    if cfg.start < TS_MIN or end > datetime.now(UTC) + TS_FUTURE_SLACK:
        raise DataError(
            f"synth.start: the logs would span {cfg.start:%Y-%m-%d} .. {end:%Y-%m-%d}, outside the range "
            f"the ingest accepts ({TS_MIN:%Y-%m-%d} .. now); choose another start"
        )


def _claim(out: Path, overwrite: bool) -> None:
    if not out.exists() or not any(out.iterdir()):
        return
    if overwrite and (out / "truth" / "meta.json").is_file():
        shutil.rmtree(out)
        return
    hint = (
        "delete it, choose a new folder, or pass overwrite=True to replace this synthetic dataset"
        if (out / "truth" / "meta.json").is_file()
        else "choose a new or empty folder"
    )
    raise DataError(f"{out}: folder is not empty; synth writes a new dataset ({hint})")


def _ingest(
    path: Path,
    out: Path,
    items: pl.DataFrame,
    users: pl.DataFrame,
    note: str,
    share: Dataset | None = None,
) -> dict[str, Any]:
    """Ingest the canonical rows in ``path`` into ``out`` with the side tables ``items`` and ``users``."""
    src = canonical.source(path)
    src.name = SOURCE
    src.items = items
    src.users = users
    src.notes.append(f"{note} ({path.stem.replace('_', ' ')})")
    return ingest(src, out, share_idmaps_with=share)


def _splits(out: Path) -> str:
    try:
        from data_pipelines.splits import write_all
    except ImportError as e:
        note = f"splits not written ({e}); data_pipelines.splits.write_all(Dataset(out), seed=0) writes them"
        print(f"note: {note}", file=sys.stderr)
        return note
    write_all(Dataset(out), seed=0)
    return "written (seed 0)"


def write_csv(
    config: SynthConfig | None,
    path: str | Path,
    n_rows: int | None = None,
    *,
    columns: Sequence[str] = CSV_COLUMNS,
) -> int:
    """Write the main logs as one canonical CSV (header of canonical column names), in log order;
    returns the number of data rows.

    ``n_rows``: exactly this many rows; users and items are scaled together from
    ``config`` so the shape of the logs (rows per user, exposure dynamics) stays the
    same, and the log is cut after the ``n_rows``-th row. No truth is written.
    Written atomically (temp file + rename).
    """
    cfg = config or SynthConfig()
    bad = [c for c in columns if c not in ROW_COLUMNS]
    if bad:
        raise ValueError(f"unknown CSV column {bad[0]!r}; expected canonical columns {list(ROW_COLUMNS)}")
    rows = generate_logs(cfg)
    if n_rows is not None:
        if n_rows < 1:
            raise ValueError("n_rows must be at least 1")
        factor = n_rows / rows.height * 1.02
        for _ in range(8):
            cfg = _scaled(config or SynthConfig(), factor)
            rows = generate_logs(cfg)
            if rows.height >= n_rows:
                break
            factor *= 1.05 * n_rows / rows.height
        rows = rows.head(n_rows)
    out = rows.select(columns)
    if "ts" in out.columns:
        out = out.with_columns(iso_utc(out["ts"]))
    atomic_write_with(Path(path), out.write_csv)
    return rows.height


def iso_utc(ts: pl.Series) -> pl.Series:
    """ISO 8601 text of a UTC timestamp series, e.g. ``2024-01-01T08:00:05Z``.

    Whole seconds are formatted through lookup tables (day, second of day): several
    times faster than ``strftime`` on millions of rows. Sub-second values use ``strftime``.
    """
    micros = ts.dt.epoch("us")
    if ts.len() == 0 or (micros % 1_000_000 != 0).any():
        return ts.dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
    secs = micros // 1_000_000
    day, sod = secs // 86_400, secs % 86_400
    first, last = int(day.min()), int(day.max())
    days = pl.Series(np.arange(first, last + 1, dtype=np.int64) * 86_400_000_000).cast(
        pl.Datetime("us", "UTC")
    )
    tod = pl.Series(np.arange(86_400, dtype=np.int64) * 1_000_000).cast(pl.Datetime("us", "UTC"))
    text = pl.DataFrame(
        {
            "d": days.dt.strftime("%Y-%m-%dT").gather(day - first),
            "t": tod.dt.strftime("%H:%M:%SZ").gather(sod),
        }
    )
    return text.select(pl.concat_str("d", "t")).to_series().rename(ts.name)


def _scaled(cfg: SynthConfig, factor: float) -> SynthConfig:
    """``cfg`` with users and items multiplied by ``factor`` (items kept above the slate sizes)."""
    n_items = max(cfg.slate_size, cfg.uniform_slate_size, 2, math.ceil(cfg.n_items * factor))
    n_users = max(2, math.ceil(cfg.n_users * factor))
    return SynthConfig.model_validate({**cfg.model_dump(), "n_users": n_users, "n_items": n_items})
