"""Bring your own log: canonical CSV (optionally through a mapping file) or canonical parquet.

CSV: a header naming canonical interaction columns (missing optional columns
are null; ``seq`` is assigned by the ingest and may not be given). A mapping
file renames a shop's export without code::

    separator: ","            # one character
    columns: {uid: user_id, sku: item_id, time: ts, action: event, price_paid: value}
    events: {pageview: view, addtocart: cart, transaction: buy}
    timestamp: auto           # auto | unix | unix_ms | iso8601 | a strftime format

Parquet: the canonical interaction columns with their canonical types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import polars as pl
import pyarrow.parquet as pq
import yaml
from pydantic import Field, ValidationError, field_validator

from data_pipelines.adapters.base import ROW_COLUMNS, ROW_SCHEMA, FileSpec, Source, finish, nonempty
from data_pipelines.lines import LINE, Dialect, read_header
from data_pipelines.schema import EVENTS
from data_pipelines.validate import number, parse_ts, resolve_ts_format
from parpo_core.config import StrictModel
from parpo_core.errors import DataError

REQUIRED = ("user_id", "item_id", "event")
STRING_COLUMNS = ("user_id", "item_id", "event", "category", "session_id", "request_id", "logging_policy")


class Mapping(StrictModel):
    """A ``--map`` file: how a shop's CSV export maps onto canonical columns."""

    separator: str = ","
    quote: str | None = '"'
    columns: dict[str, str] = Field(default_factory=dict)
    events: dict[str, str] = Field(default_factory=dict)
    timestamp: str = "auto"
    encoding: Literal["utf-8", "latin-1"] = "utf-8"

    @field_validator("separator")
    @classmethod
    def _one_char(cls, v: str) -> str:
        if len(v) != 1:
            raise ValueError("must be exactly one character")
        return v

    @field_validator("columns")
    @classmethod
    def _canonical_targets(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [t for t in v.values() if t not in ROW_COLUMNS]
        if bad:
            raise ValueError(f"unknown canonical column(s) {bad}; expected one of {list(ROW_COLUMNS)}")
        return v

    @field_validator("events")
    @classmethod
    def _canonical_events(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [t for t in v.values() if t not in EVENTS]
        if bad:
            raise ValueError(f"unknown canonical event(s) {bad}; expected one of {list(EVENTS)}")
        return v


def load_mapping(path: Path) -> Mapping:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise DataError(f"{path}: cannot read mapping file: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: a mapping file is a YAML mapping (separator, columns, events, timestamp)")
    try:
        return Mapping.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise DataError(f"{path}: {key}: {err['msg']}") from None


def source(path: Path, mapping: Path | None = None) -> Source:
    """A canonical CSV (optionally through a mapping file) or a canonical parquet file."""
    if not path.is_file():
        raise DataError(f"{path}: no such file (canonical input is one CSV or parquet file)")
    if path.suffix.lower() == ".parquet":
        if mapping is not None:
            raise DataError("--map applies to CSV input only; parquet input must use canonical column names")
        return Source("canonical", [_parquet_spec(path)])
    m = load_mapping(mapping) if mapping else Mapping()
    probe = Dialect(columns=None, separator=m.separator, quote=m.quote, header=True, encoding=m.encoding)
    header = read_header(path, probe)
    renamed = [m.columns.get(h, h) for h in header]
    unknown = [h for h, r in zip(header, renamed, strict=True) if r not in ROW_COLUMNS]
    if unknown:
        hint = " (seq is assigned at ingest)" if "seq" in unknown else " (map it with --map, or drop it)"
        raise DataError(f"{path}: header column {unknown[0]!r} is not a canonical interaction column{hint}")
    dupes = {r for r in renamed if renamed.count(r) > 1}
    if dupes:
        raise DataError(f"{path}: header maps more than one column to {sorted(dupes)[0]!r}")
    missing = [c for c in REQUIRED if c not in renamed]
    if missing:
        raise DataError(f"{path}: header has no {missing[0]!r} column (required: {', '.join(REQUIRED)})")
    dialect = Dialect(tuple(renamed), separator=m.separator, quote=m.quote, header=True, encoding=m.encoding)
    return Source("canonical", [FileSpec(path, lambda f: csv_rows(f, m), dialect)])


def csv_rows(fields: pl.DataFrame, m: Mapping) -> pl.DataFrame:
    """String fields named by canonical columns -> typed canonical rows."""
    exprs, reasons = [], []
    for c in fields.columns:
        if c == "event" and m.events:
            exprs.append(nonempty(pl.col("event")).replace(m.events).alias("event"))
        elif c in STRING_COLUMNS:
            exprs.append(nonempty(pl.col(c)).alias(c))
    if "ts" in fields.columns:
        ts, why = parse_ts("ts", resolve_ts_format(fields["ts"], m.timestamp))
        exprs.append(ts.alias("ts"))
        reasons.append(why)
    for c, t in (("value", pl.Float64), ("propensity", pl.Float64), ("position", pl.Int32)):
        if c in fields.columns:
            v, why = number(c, t)
            exprs.append(v.alias(c))
            reasons.append(why)
    named = [r.alias(f"__why{i}") for i, r in enumerate(reasons)]
    return finish(fields.select(LINE, *exprs, *named), *[pl.col(r.meta.output_name()) for r in named])


def _parquet_spec(path: Path) -> FileSpec:
    try:
        schema = pq.read_schema(path)
    except Exception as e:  # pyarrow raises several types for a non-parquet file
        raise DataError(f"{path}: not a parquet file ({str(e).splitlines()[0]})") from None
    names = set(schema.names) - {"seq"}
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise DataError(
            f"{path}: parquet input has no {missing[0]!r} column (required: {', '.join(REQUIRED)})"
        )
    unknown = sorted(names - set(ROW_COLUMNS))
    if unknown:
        raise DataError(f"{path}: parquet column {unknown[0]!r} is not a canonical interaction column")

    def rows(df: pl.DataFrame) -> pl.DataFrame:
        cols = [c for c in ROW_COLUMNS if c in df.columns]
        exprs = []
        for c in cols:
            want = ROW_SCHEMA[c]
            if c in STRING_COLUMNS:
                exprs.append(nonempty(pl.col(c).cast(pl.String)).alias(c))
            elif c == "ts" and df.schema[c] == pl.Datetime:
                ts = pl.col(c)
                ts = (
                    ts.dt.replace_time_zone("UTC")
                    if df.schema[c].time_zone is None
                    else ts.dt.convert_time_zone("UTC")
                )
                exprs.append(ts.dt.cast_time_unit("us").alias(c))
            else:
                try:
                    df.select(pl.col(c).cast(want))
                except pl.exceptions.PolarsError:
                    raise DataError(
                        f"{path}: column {c!r} has type {df.schema[c]}, expected {want}"
                    ) from None
                exprs.append(pl.col(c).cast(want).alias(c))
        return finish(df.select(LINE, *exprs))

    return FileSpec(path, rows, None)
