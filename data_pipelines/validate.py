"""Row checks shared by every source, and the reasons a row is quarantined.

Adapters produce typed canonical rows plus ``__reason`` for what only they can
judge (an unparseable number, an unmapped event); these checks add what holds
for every source. A row's reason is its first failed check.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from data_pipelines.schema import EVENTS
from parpo_core.limits import TS_MIN, ts_bounds

REASON = "__reason"
LINE = "__line"
ORD = "__ord"  # the row's ordinal within its source line (a line may yield several rows)


def resolve_ts_format(values: pl.Series, fmt: str) -> str:
    """Narrow ``auto``/``unix`` to ``unix_int`` when every non-empty value is an integer.

    Decided per chunk, so the common case (integer Unix seconds) skips the float and
    ISO 8601 parsers; any other value keeps the general format.
    """
    if fmt not in ("auto", "unix"):
        return fmt
    present = values.filter(values.str.len_bytes() > 0)
    return "unix_int" if present.cast(pl.Int64, strict=False).null_count() == 0 else fmt


def parse_ts(col: str, fmt: str = "auto") -> tuple[pl.Expr, pl.Expr]:
    """(timestamp[us, UTC] expression, reason expression) for a string column.

    ``fmt``: ``"auto"`` (Unix seconds or ISO 8601 with an offset), ``"unix"``,
    ``"unix_ms"``, ``"iso8601"`` or a strftime format (read as UTC unless it has ``%z``);
    ``"unix_int"`` is ``"unix"`` known to hold integers (see ``resolve_ts_format``).
    Empty strings are null (no timestamp), not errors.
    """
    raw = pl.col(col)
    s = pl.when(raw.str.len_bytes() == 0).then(None).otherwise(raw)
    if fmt == "unix_int":
        value = (s.cast(pl.Int64, strict=False) * 1_000_000).cast(pl.Datetime("us", "UTC"))
        return value, pl.when(s.is_not_null() & value.is_null()).then(
            pl.format("timestamp '{}' is not Unix seconds", s)
        )
    secs = s.cast(pl.Float64, strict=False)
    scale = 1_000 if fmt == "unix_ms" else 1_000_000
    unix = (secs * scale).round().cast(pl.Int64, strict=False).cast(pl.Datetime("us", "UTC"))
    iso = s.str.to_datetime(format="%+", time_unit="us", time_zone="UTC", strict=False)
    if fmt == "auto":
        value = pl.when(secs.is_not_null()).then(unix).otherwise(iso)
        what = "ISO 8601 with an offset or Unix seconds"
    elif fmt in ("unix", "unix_ms"):
        value, what = unix, f"Unix {'milliseconds' if fmt == 'unix_ms' else 'seconds'}"
    elif fmt == "iso8601":
        value, what = iso, "ISO 8601 with an offset"
    else:
        parsed = s.str.to_datetime(format=fmt, time_unit="us", strict=False)
        value = parsed.dt.convert_time_zone("UTC") if "%z" in fmt else parsed.dt.replace_time_zone("UTC")
        what = f"in the format {fmt!r}"
    reason = pl.when(s.is_not_null() & value.is_null()).then(pl.format(f"timestamp '{{}}' is not {what}", s))
    return value, reason


def number(col: str, dtype: pl.DataType = pl.Float64) -> tuple[pl.Expr, pl.Expr]:
    """(typed expression, reason expression) for a numeric string column; empty is null."""
    raw = pl.col(col)
    s = pl.when(raw.str.len_bytes() == 0).then(None).otherwise(raw)
    value = s.cast(dtype, strict=False)
    name = "an integer" if dtype.is_integer() else "a number"
    return value, pl.when(s.is_not_null() & value.is_null()).then(pl.format(f"{col} '{{}}' is not {name}", s))


def common_checks(now: datetime | None = None) -> list[tuple[pl.Expr, pl.Expr]]:
    """The checks every canonical row must pass, as (failed, message) pairs.

    ``failed`` is cheap and evaluated on every row; ``message`` only on the rows that
    failed (formatting a timestamp for every row cost more than all checks together).
    """
    _, ts_max = ts_bounds(now)
    events = list(EVENTS)
    return [
        (
            pl.col("user_id").is_null() & pl.col("request_id").is_null(),
            pl.lit("user_id is empty (only anonymous rows with a request_id may omit it)"),
        ),
        (pl.col("item_id").is_null(), pl.lit("item_id is empty")),
        (pl.col("event").is_null(), pl.lit("event is empty")),
        (
            ~pl.col("event").is_in(events),
            pl.format(f"unknown event '{{}}' (expected one of: {', '.join(EVENTS)})", pl.col("event")),
        ),
        (
            (pl.col("ts") < TS_MIN) | (pl.col("ts") > ts_max),
            pl.format(
                f"timestamp {{}} is out of range [{TS_MIN:%Y-%m-%d}, {ts_max:%Y-%m-%d}]",
                pl.col("ts").dt.to_string("%Y-%m-%dT%H:%M:%SZ"),
            ),
        ),
        (
            pl.col("propensity").is_not_null() & ~pl.col("propensity").is_between(0, 1, closed="right"),
            pl.format("propensity {} is outside (0, 1]", pl.col("propensity")),
        ),
        (
            pl.col("position").is_not_null() & (pl.col("position") < 1),
            pl.format("position {} is not 1-based", pl.col("position")),
        ),
        (
            pl.col("value").is_not_null() & ~pl.col("value").is_finite(),
            pl.format("value {} is not finite", pl.col("value")),
        ),
    ]


def failing_lines(rows: pl.DataFrame, checks: list[tuple[pl.Expr, pl.Expr]]) -> pl.DataFrame:
    """(__line, __reason) of every line with a failing row: the adapter's reason first,
    then the first failed common check."""
    failed = pl.any_horizontal([pl.col(REASON).is_not_null(), *(c.fill_null(False) for c, _ in checks)])
    reason = pl.coalesce([pl.col(REASON), *(pl.when(c.fill_null(False)).then(m) for c, m in checks)])
    return (
        rows.filter(failed)
        .select(LINE, reason.alias(REASON))
        .group_by(LINE, maintain_order=True)
        .agg(pl.col(REASON).first())
    )
