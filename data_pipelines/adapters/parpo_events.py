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

Quarantined with a reason (never silently dropped): a decision superseded by a later one for
the same request id (a client retry: events refer to the last), events the server flagged as
``duplicate`` or ``item_mismatch``, events of unknown requests without both a user and an
item, and lines that are not JSON records (a torn write of a crash was never acknowledged).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from data_pipelines.adapters.base import FileSpec, Source, finish
from data_pipelines.lines import LINE, TEXT, Dialect
from data_pipelines.validate import ORD
from parpo_core.errors import DataError
from parpo_core.records import RECORD_SCHEMA_VERSION

DIALECT = Dialect(columns=None, separator="\x1f", quote=None)
SLATE = pl.List(pl.Struct({"item_id": pl.String, "position": pl.Int32, "propensity": pl.Float64}))
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
        "position": pl.Int32,
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


def _decode(fields: pl.DataFrame, dtype: pl.Struct) -> pl.DataFrame:
    """``__line``, the decoded record's fields and ``__why`` (lines that are not JSON records)."""
    text = pl.col(TEXT)
    try:
        rec = fields.select(
            LINE, text.str.json_decode(dtype=dtype).alias("__rec"), pl.lit(None, pl.String).alias("__why")
        )
    except pl.exceptions.ComputeError:  # a torn or foreign line somewhere: decide line by line
        ok = [_is_record(t) for t in fields[TEXT].to_list()]
        good = fields.filter(pl.Series(ok))
        rec = pl.concat(
            [
                good.select(
                    LINE,
                    text.str.json_decode(dtype=dtype).alias("__rec"),
                    pl.lit(None, pl.String).alias("__why"),
                ),
                fields.filter(~pl.Series(ok)).select(
                    LINE,
                    pl.lit(None, dtype).alias("__rec"),
                    pl.lit("not a JSON record (a torn write is never acknowledged)").alias("__why"),
                ),
            ]
        ).sort(LINE)
    return rec.unnest("__rec").with_columns(_version_check().alias("__why"))


def _version_check() -> pl.Expr:
    """``__why`` for records whose ``schema_version`` this reader does not know (newer, or none)."""
    v = pl.col("schema_version")
    return (
        pl.when(pl.col("__why").is_not_null())
        .then(pl.col("__why"))
        .when(v.is_null())
        .then(pl.lit("record has no schema_version (not a PARPO server record)"))
        .when(v > RECORD_SCHEMA_VERSION)
        .then(
            pl.format(
                "record schema_version {} is newer than this parpo reads ({}); upgrade parpo",
                v,
                pl.lit(RECORD_SCHEMA_VERSION),
            )
        )
    )


def _is_record(text: str | None) -> bool:
    try:
        return isinstance(json.loads(text or ""), dict)
    except ValueError:
        return False


def _ts(col: str) -> pl.Expr:
    return (pl.col(col) * 1_000_000).round().cast(pl.Int64).cast(pl.Datetime("us", "UTC"))


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
            pl.when(pl.col("__why").is_null() & (pl.col("ts") < pl.col("__last_ts")))
            .then(
                pl.lit(
                    "superseded by a later decision for the same request id (a client retry; events refer to the last)"
                )
            )
            .otherwise(pl.col("__why"))
            .alias("__why")
        )
    bad = df.filter(pl.col("__why").is_not_null()).select(LINE, "__why")
    ok = (
        df.filter(pl.col("__why").is_null())
        .with_columns(
            _logging_policy().alias("logging_policy"),
            _context().alias("__context"),
            pl.col("request").struct.field("category"),
        )
        .explode("slate")
        .filter(pl.col("slate").is_not_null())  # a decision with an empty slate served nothing
        .with_columns(
            pl.col("slate").struct.field("item_id"),
            pl.col("slate").struct.field("position"),
            pl.col("slate").struct.field("propensity"),
            pl.int_range(pl.len(), dtype=pl.Int32).over(LINE).alias(ORD),
            pl.lit("impression").alias("event"),
            _ts("ts").alias("ts"),
        )
        .select(
            LINE,
            ORD,
            "user_id",
            "item_id",
            "ts",
            "event",
            "category",
            "request_id",
            "position",
            "propensity",
            "logging_policy",
            "__context",
            "__why",
        )  # fmt: skip
    )
    return finish(pl.concat([ok, bad], how="diagonal_relaxed").sort(LINE, ORD), pl.col("__why"))


def _event_rows(decisions: pl.DataFrame):
    def rows(fields: pl.DataFrame) -> pl.DataFrame:
        df = _decode(fields, EVENT).join(decisions, on=["request_id", "position"], how="left")
        why = (
            pl.when(pl.col("__why").is_not_null())
            .then(pl.col("__why"))
            .when(pl.col("duplicate"))
            .then(pl.lit("duplicate event (flagged by the server)"))
            .when(pl.col("item_mismatch"))
            .then(pl.lit("item_id disagrees with the logged decision (flagged by the server)"))
            .when(pl.coalesce("item_id", "logged_item_id", "__d_item").is_null())
            .then(pl.lit("unknown request id and no item_id"))
            .when(pl.coalesce("user_id", "__d_user").is_null())
            .then(pl.lit("unknown request id and no user_id"))
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
            why.alias("__why"),
        )
        return finish(out, pl.col("__why"))

    return rows


def _decision_index(files: list[Path]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(request_id, position -> the last decision's user, item, category, propensity and logging
    policy; request_id -> ``__last_ts``, the raw ts of its last decision)."""
    schema = {"request_id": pl.String, "position": pl.Int32, "__d_user": pl.String, "__d_item": pl.String,
              "__d_category": pl.String, "__d_propensity": pl.Float64, "__d_policy": pl.String}  # fmt: skip
    parts, stamps = [], []
    for f in files:
        lines = pl.DataFrame({TEXT: f.read_text(errors="replace").splitlines()}, schema={TEXT: pl.String})
        lines = lines.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias(LINE))
        stamps.append(_decode(lines, DECISION).filter(pl.col("__why").is_null()).select("request_id", "ts"))
        rows = _decision_rows(lines)
        parts.append(
            rows.filter(pl.col("__reason").is_null()).select(
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
        return pl.DataFrame(schema=schema), pl.DataFrame(schema=latest_schema)
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
    return index, latest


def source(path: Path) -> Source:
    decisions = sorted((path / "decisions").glob("*.jsonl")) if path.is_dir() else []
    events = sorted((path / "events").glob("*.jsonl")) if path.is_dir() else []
    if not decisions and not events:
        raise DataError(f"{path}: no PARPO server logs (expected decisions/*.jsonl and events/*.jsonl)")
    index, latest = _decision_index(decisions)
    specs = [FileSpec(f, lambda x: _decision_rows(x, latest), DIALECT, scope="decisions") for f in decisions]
    specs += [FileSpec(f, _event_rows(index), DIALECT, scope="events") for f in events]
    return Source("parpo-events", specs)
