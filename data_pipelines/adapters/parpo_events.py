"""The PARPO server's decision and event logs (``parpo serve --events DIR``) as canonical rows.

``--input`` is the ``--events`` folder: ``decisions/*.jsonl`` and ``events/*.jsonl``, one JSON
record per line (docs/serving.md has the record formats; this adapter reads the files, never
the ``serving`` package). The result:

- every served slate item becomes an ``impression`` row: ``user_id``, ``item_id``, ``ts`` (the
  decision time), ``category`` (the request's), ``request_id``, ``position`` (1-based),
  ``propensity`` (the server's Monte-Carlo marginal) and ``logging_policy``: the policy version
  for sampled (evaluable) decisions, ``<version>:greedy`` for greedy ones and
  ``<version>:popularity`` for fallbacks (both with propensity 1, deterministic);
- every feedback event becomes a row of its kind (``click``, ``cart``, ``fav``, ``buy``,
  ``impression``) joined to its decision by request id and position: the item is the event's
  ``item_id`` or else the logged one, the user the event's or the decision's, ``propensity``
  and ``logging_policy`` those of the decision's impression (a client's ``impression`` event
  has no propensity: it confirms a view, the decision's row is the logged draw), ``ts`` the
  client's or else the server's receive time, ``value`` the event's.

Quarantined with a reason (never silently dropped, and one bad record never fails the rest of
its file): a decision superseded by a later one for the same request id (a client retry: events
refer to the last), events the server flagged as ``duplicate`` or ``item_mismatch``, events of
unknown requests without both a user and an item, lines that are not JSON records (a torn write
of a crash was never acknowledged), records of an unknown ``schema_version``, records missing a
required field or with a field of the wrong type (``NaN`` and ``Infinity`` included, naming the
field), a ``ts`` or ``received`` outside ``parpo_core.limits.ts_bounds``, a ``value`` beyond
``VALUE_MAX``, a position that is not a 1-based slot, and decisions with a slate entry whose
propensity is missing or outside (0, 1] (such a slate is no draw an estimator may use).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from data_pipelines.adapters.base import FileSpec, Source, finish
from data_pipelines.adapters.jsonl import REC, WHY, decode
from data_pipelines.idrule import apply_id_rule
from data_pipelines.lines import LINE, TEXT, Dialect, read_chunks
from data_pipelines.validate import ORD, common_checks, failing_lines
from parpo_core.errors import DataError
from parpo_core.limits import VALUE_MAX, ts_bounds
from parpo_core.records import RECORD_SCHEMA_VERSION

DIALECT = Dialect(columns=None, separator="\x1f", quote=None)
# Positions are read as floats and checked (a JSON integer read as Int32 truncates 1.5 and
# turns 3e9 into null without a word); ``_position`` casts the valid ones.
SLATE = pl.List(pl.Struct({"item_id": pl.String, "position": pl.Float64, "propensity": pl.Float64}))
DECISION = pl.Struct(
    {
        "schema_version": pl.Int64,
        "request_id": pl.String,
        "user_id": pl.String,
        "ts": pl.Float64,
        "policy_version": pl.String,
        "evaluable": pl.Boolean,
        "fallback": pl.String,
        "explore": pl.Float64,
        "n_samples": pl.Int32,
        "request": pl.Struct(
            {
                "category": pl.String,
                "constraints": pl.Struct(
                    {"price_min": pl.Float64, "price_max": pl.Float64, "attributes": pl.List(pl.String)}
                ),
                "text": pl.String,
            }
        ),
        "k": pl.Int32,
        "candidates": pl.List(pl.String),
        "slate": SLATE,
    }
)
EVENT = pl.Struct(
    {
        "schema_version": pl.Int64,
        "request_id": pl.String,
        "position": pl.Float64,
        "event": pl.String,
        "item_id": pl.String,
        "user_id": pl.String,
        "ts": pl.Float64,
        "received": pl.Float64,
        "value": pl.Float64,
        "logged_item_id": pl.String,
        "duplicate": pl.Boolean,
        "unknown_request": pl.Boolean,
        "item_mismatch": pl.Boolean,
    }
)


NOT_A_RECORD = "not a JSON record (a torn write is never acknowledged)"
NO_VERSION = "record has no schema_version (not a PARPO server record)"
NEWER = "record schema_version {} is newer than this parpo reads ({}); upgrade parpo"
#: Fields without which a record means nothing (the record models require them).
REQUIRED = {
    "decision": ("request_id", "ts", "policy_version", "evaluable", "slate"),
    "event": ("request_id", "position", "event", "received"),
}
#: The largest position a slot may have (positions are Int32 in the canonical schema).
POSITION_MAX = 2**31 - 1


def _decode(fields: pl.DataFrame, dtype: pl.Struct) -> pl.DataFrame:
    """``__line``, the decoded record's fields and ``__why``: the first reason the record is
    rejected (not a JSON record, a field of the wrong type, an unknown ``schema_version``, a
    missing required field, a timestamp out of range), null for a good one."""
    kind = "decision" if dtype is DECISION else "event"
    df = decode(fields, dtype, NOT_A_RECORD, _version_problem).unnest(REC)
    missing = [
        pl.when(pl.col(c).is_null()).then(pl.lit(f"record has no '{c}' field")) for c in REQUIRED[kind]
    ]
    stamps = [_ts_problem("ts")] + ([_ts_problem("received")] if kind == "event" else [])
    return df.with_columns(pl.coalesce(WHY, _version_check(), *missing, *stamps).alias(WHY))


def _version_problem(record: dict) -> str | None:
    """The schema_version reason of a record polars could not decode (a newer version may have
    retyped a field: its version is the reason, not the field)."""
    v = record.get("schema_version")
    if v is None:
        return NO_VERSION
    if isinstance(v, int) and v > RECORD_SCHEMA_VERSION:
        return NEWER.format(v, RECORD_SCHEMA_VERSION)
    return None


def _version_check() -> pl.Expr:
    """The reason for records whose ``schema_version`` this reader does not know (newer, or none)."""
    v = pl.col("schema_version")
    newer = pl.format(NEWER, v, pl.lit(RECORD_SCHEMA_VERSION))
    return pl.when(v.is_null()).then(pl.lit(NO_VERSION)).when(v > RECORD_SCHEMA_VERSION).then(newer)


def _ts_problem(col: str) -> pl.Expr:
    """The reason for a timestamp (Unix seconds) outside ``ts_bounds`` (the server's own
    bounds): checked before the conversion, which cannot hold 1e13 seconds in microseconds."""
    lo, hi = ts_bounds()
    secs = pl.col(col)
    return pl.when(secs.is_not_null() & ~secs.is_between(lo.timestamp(), hi.timestamp())).then(
        pl.format(f"{col} {{}} is out of range [{lo:%Y-%m-%d}, {hi:%Y-%m-%d}] (Unix seconds)", secs)
    )


def _ts(col: str) -> pl.Expr:
    """Unix seconds as timestamp[us, UTC]; null where out of range (``_ts_problem`` says why)."""
    lo, hi = ts_bounds()
    secs = pl.col(col)
    us = (secs * 1_000_000).round().cast(pl.Int64, strict=False).cast(pl.Datetime("us", "UTC"))
    return pl.when(secs.is_between(lo.timestamp(), hi.timestamp())).then(us)


def _position(col: str, label: str) -> tuple[pl.Expr, pl.Expr]:
    """(the position as Int32, the reason when it is not a 1-based slot number)."""
    p = pl.col(col)
    ok = p.is_between(1, POSITION_MAX) & (p == p.floor())
    return (
        pl.when(ok).then(p.cast(pl.Int32, strict=False)),
        pl.when(p.is_not_null() & ~ok).then(pl.format(f"{label} {{}} is not a 1-based slot number", p)),
    )


def _logging_policy() -> pl.Expr:
    v = pl.col("policy_version")
    return (
        pl.when(pl.col("fallback").is_not_null())
        .then(pl.format("{}:{}", v, pl.col("fallback")))
        .when(~pl.col("evaluable"))
        .then(pl.format("{}:greedy", v))
        .otherwise(v)
    )


def _context() -> pl.Expr:
    """The request as the API received it (what a replayed policy must answer), and how it was served."""
    r = pl.col("request").struct
    asked = pl.struct(
        r.field("category"), r.field("constraints"), r.field("text"), pl.col("k"), pl.col("candidates")
    ).struct.json_encode()
    entries = [pl.struct(key=pl.lit("request"), value=asked)] + [
        pl.when(pl.col(c).is_not_null()).then(pl.struct(key=pl.lit(c), value=pl.col(c).cast(pl.String)))
        for c in ("explore", "n_samples")
    ]
    return pl.concat_list(entries).list.drop_nulls()


def _decision_rows(fields: pl.DataFrame, latest: pl.DataFrame | None = None) -> pl.DataFrame:
    """Impression rows of each decision; with ``latest`` (request id -> the ts of its last
    decision), a decision superseded by a later one for the same request id is quarantined."""
    df = _decode(fields, DECISION)
    if latest is not None:
        df = df.join(latest, on="request_id", how="left").with_columns(
            pl.when(pl.col(WHY).is_null() & (pl.col("ts") < pl.col("__last_ts")))
            .then(
                pl.lit(
                    "superseded by a later decision for the same request id (a client retry; events refer to the last)"
                )
            )
            .otherwise(pl.col(WHY))
            .alias(WHY)
        )
    bad = df.filter(pl.col(WHY).is_not_null()).select(LINE, WHY)
    ok = (
        df.filter(pl.col(WHY).is_null())
        .with_columns(
            _logging_policy().alias("logging_policy"),
            _context().alias("__context"),
            pl.col("request").struct.field("category"),
        )
        .explode("slate")
        .filter(pl.col("slate").is_not_null())  # a decision with an empty slate served nothing
        .with_columns(
            pl.col("slate").struct.field("item_id"),
            pl.col("slate").struct.field("position").alias("__position"),
            pl.col("slate").struct.field("propensity"),
            pl.int_range(pl.len(), dtype=pl.Int32).over(LINE).alias(ORD),
            pl.lit("impression").alias("event"),
            _ts("ts").alias("ts"),
        )
    )
    position, position_why = _position("__position", "slate position")
    # Every served slate entry carries its propensity (1 for greedy and fallback decisions): one
    # without is a broken record, never a sampled impression an estimator may weight.
    no_propensity = pl.when(pl.col("propensity").is_null()).then(
        pl.format("slate position {} has no propensity", position)
    )
    ok = ok.with_columns(
        position.alias("position"), pl.coalesce(position_why, no_propensity).alias(WHY)
    ).select(
        LINE, ORD, "user_id", "item_id", "ts", "event", "category", "request_id", "position",
        "propensity", "logging_policy", "__context", WHY,
    )  # fmt: skip
    return finish(pl.concat([ok, bad], how="diagonal_relaxed").sort(LINE, ORD), pl.col(WHY))


def _e(x: float) -> str:
    """1e12, not 1e+12 or 1000000000000."""
    return f"{x:.0e}".replace("e+", "e")


def _event_rows(decisions: pl.DataFrame, rejected: pl.DataFrame):
    """Rows of an events file, joined to ``decisions`` (the decision index); ``rejected``: the
    request ids whose every decision was rejected (for the reason of their orphaned events)."""

    def rows(fields: pl.DataFrame) -> pl.DataFrame:
        position, position_why = _position("position", "position")
        df = (
            _decode(fields, EVENT)
            .with_columns(position.alias("position"), pl.coalesce(WHY, position_why).alias(WHY))
            .join(decisions, on=["request_id", "position"], how="left")
        )
        value = pl.col("value")
        unknown = (
            pl.when(pl.col("request_id").is_in(rejected["request_id"].implode()))
            .then(pl.lit("the request's decision was rejected"))
            .otherwise(pl.lit("unknown request id"))
        )
        why = (
            pl.when(pl.col(WHY).is_not_null())
            .then(pl.col(WHY))
            .when(value.abs() > VALUE_MAX)
            .then(pl.format(f"value {{}} is outside [-{_e(VALUE_MAX)}, {_e(VALUE_MAX)}]", value))
            .when(pl.col("duplicate"))
            .then(pl.lit("duplicate event (flagged by the server)"))
            .when(pl.col("item_mismatch"))
            .then(pl.lit("item_id disagrees with the logged decision (flagged by the server)"))
            .when(pl.coalesce("item_id", "logged_item_id", "__d_item").is_null())
            .then(pl.format("{} and no item_id", unknown))
            .when(pl.coalesce("user_id", "__d_user").is_null())
            .then(pl.format("{} and no user_id", unknown))
        )
        out = df.select(
            LINE,
            pl.coalesce("user_id", "__d_user").alias("user_id"),
            pl.coalesce("item_id", "logged_item_id", "__d_item").alias("item_id"),
            pl.coalesce(_ts("ts"), _ts("received")).alias("ts"),
            "event",
            "value",
            pl.col("__d_category").alias("category"),
            "request_id",
            "position",
            # A client's own impression confirms a view; the logged draw is the decision's row.
            pl.when(pl.col("event") != "impression").then(pl.col("__d_propensity")).alias("propensity"),
            pl.col("__d_policy").alias("logging_policy"),
            why.alias(WHY),
        )
        return finish(out, pl.col(WHY))

    return rows


def _decision_index(files: list[Path]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(request_id, position -> the last decision's user, item, category, propensity and logging
    policy; request_id -> ``__last_ts``, the raw ts of its last decision; the request ids with
    no accepted decision). Only decisions the ingest accepts count: a rejected one neither
    supersedes another nor lends its propensity."""
    schema = {"request_id": pl.String, "position": pl.Int32, "__d_user": pl.String, "__d_item": pl.String,
              "__d_category": pl.String, "__d_propensity": pl.Float64, "__d_policy": pl.String}  # fmt: skip
    checks = common_checks()
    parts, stamps, asked = [], [], []
    for f in files:
        for chunk in read_chunks(f, DIALECT):
            lines = chunk.fields.select(LINE, TEXT)
            rows = _decision_rows(lines)  # ids as logged: events join them as logged too
            trimmed, id_rule = apply_id_rule(rows)
            rejected = failing_lines(trimmed, checks + id_rule).select(LINE)
            rows = rows.join(rejected, on=LINE, how="anti")
            decoded = _decode(lines, DECISION)
            asked.append(decoded.select("request_id").drop_nulls())
            good = decoded.filter(pl.col(WHY).is_null()).join(rejected, on=LINE, how="anti")
            stamps.append(good.select("request_id", "ts"))
            parts.append(
                rows.select(
                    "request_id",
                    pl.col("ts").alias("__d_ts"),
                    "position",
                    pl.col("user_id").alias("__d_user"),
                    pl.col("item_id").alias("__d_item"),
                    pl.col("category").alias("__d_category"),
                    pl.col("propensity").alias("__d_propensity"),
                    pl.col("logging_policy").alias("__d_policy"),
                )  # fmt: skip
            )
    latest_schema = {"request_id": pl.String, "__last_ts": pl.Float64}
    if not parts:
        none = pl.DataFrame(schema={"request_id": pl.String})
        return pl.DataFrame(schema=schema), pl.DataFrame(schema=latest_schema), none
    # A request id served twice (a client retry): the last decision is the one events refer to.
    latest = pl.concat(stamps).group_by("request_id").agg(pl.col("ts").max().alias("__last_ts"))
    last_ts = latest.select("request_id", _ts("__last_ts").alias("__last"))
    index = (
        pl.concat(parts)
        .join(last_ts, on="request_id")
        .filter(pl.col("__d_ts") == pl.col("__last"))
        .drop("__d_ts", "__last")
        .unique(["request_id", "position"], keep="last", maintain_order=True)
    )
    rejected = pl.concat(asked).unique().join(index.select("request_id"), on="request_id", how="anti")
    return index, latest, rejected


def source(path: Path) -> Source:
    decisions = sorted((path / "decisions").glob("*.jsonl")) if path.is_dir() else []
    events = sorted((path / "events").glob("*.jsonl")) if path.is_dir() else []
    if not decisions and not events:
        raise DataError(f"{path}: no PARPO server logs (expected decisions/*.jsonl and events/*.jsonl)")
    index, latest, rejected = _decision_index(decisions)
    specs = [FileSpec(f, lambda x: _decision_rows(x, latest), DIALECT, scope="decisions") for f in decisions]
    specs += [FileSpec(f, _event_rows(index, rejected), DIALECT, scope="events") for f in events]
    return Source("parpo-events", specs)
