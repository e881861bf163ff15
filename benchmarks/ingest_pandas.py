"""Reference for ``benchmarks/ingest.py``: the ingest's validation, dedupe, ``seq`` and id maps in pandas.

Idiomatic, vectorised pandas (no Python loop over rows), the same semantics as
``data_pipelines.ingest`` for a canonical CSV (header, default dialect) or a
Taobao CSV (no header, no quoting):

1. Lines: ``pd.read_csv`` reads the whole file as one string column (separator
   ``\\x01``, no quoting, blank lines kept), so every physical line is a row and
   its line number is its position.
2. Line checks, vectorised with ``.str``: empty lines; lines with a quote
   must match the quoted-CSV regex (else "broken quoting"); the separator count
   outside quoted fields must be ``n_columns - 1`` (else "ragged line").
3. The accepted lines are joined and parsed once more by ``pd.read_csv``
   (pyarrow engine, all strings, ``keep_default_na=False``).
4. Typing and row checks: ``pd.to_numeric(errors="coerce")``,
   ``pd.to_datetime``; a row's reason is its first failed check, in the order
   the ingest applies them (adapter, then common checks).
5. Exact dedupe of records (the raw text of lines that passed every check)
   with ``Series.duplicated``.
6. ``seq``: stable sort by (user or request, ts, line) then ``groupby().cumcount()``.
7. Id maps by ``pd.unique`` (order of first appearance); items keep each
   item's last non-null category.
8. Interactions, rejects, id maps, items and users written with pyarrow, zstd.

Not reproduced (ours does them on top): the sha256 of the input and output
files, the persisted dedupe keys, staging/bucketing and the transactional
manifest. Timestamps given as ISO 8601 need an explicit offset (``Z`` or
``+hh:mm``), as ours requires.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from data_pipelines.schema import EVENTS, IDMAP, INTERACTIONS, ITEMS, REJECTS, USERS

TAOBAO_COLUMNS = ["user", "item", "category", "behavior", "ts"]
TAOBAO_EVENTS = {"pv": "view", "cart": "cart", "fav": "fav", "buy": "buy"}
STRING_COLUMNS = ("user_id", "item_id", "event", "category", "session_id", "request_id", "logging_policy")
ROW_COLUMNS = [f.name for f in INTERACTIONS if f.name != "seq"]
TS_MIN = pd.Timestamp("1990-01-01", tz="UTC")
DUPLICATE = "exact duplicate of an earlier record"
QUOTE, SEP = '"', ","
_FIELD = '"(?:[^"]|"")*"'
_PLAIN = '[^",]*'
QUOTED_LINE = f"(?:{_FIELD}|{_PLAIN})(?:,(?:{_FIELD}|{_PLAIN}))*"
NAN_WORDS = ("nan", "+nan", "-nan")


def ingest(path: Path, fmt: str, out: Path, now: datetime | None = None) -> dict:
    """Ingest ``path`` (``fmt``: "canonical" or "taobao") into ``out``; returns accounting and counts."""
    now = now or datetime.now(UTC)
    taobao = fmt == "taobao"
    if taobao:
        columns, first_line, quote = TAOBAO_COLUMNS, 1, None
    else:
        with open(path, encoding="utf-8") as f:
            columns = [c.strip() for c in next(csv.reader([f.readline()]))]
        first_line, quote = 2, QUOTE

    # 1. Physical lines.
    text = pd.read_csv(
        path,
        sep="\x01",
        header=None,
        names=["text"],
        dtype=str,
        quoting=csv.QUOTE_NONE,
        skip_blank_lines=False,
        na_filter=False,
        skiprows=first_line - 1,
        engine="c",
    )["text"]
    text.index = pd.RangeIndex(first_line, first_line + len(text), name="line")
    rows_in = len(text)

    # 2. Line checks.
    reason = pd.Series(np.nan, index=text.index, dtype=object)
    _flag(reason, text == "", "empty line")
    n_sep = text.str.len() - text.str.replace(SEP, "", regex=False).str.len()
    quoted = text.str.contains(quote, regex=False) if quote else pd.Series(False, index=text.index)
    if quoted.any():
        q = text[quoted]
        _flag(
            reason,
            (~q.str.fullmatch(QUOTED_LINE)).reindex(text.index, fill_value=False),
            "broken quoting: unbalanced or stray quote (a quoted field cannot span lines)",
        )
        n_sep = n_sep.mask(quoted, q.str.replace(_FIELD, "", regex=True).str.count(SEP))
    n_found = n_sep.astype("int64") + 1
    _flag(
        reason,
        n_found != len(columns),
        lambda hit: (
            "ragged line: expected " + str(len(columns)) + " fields, found " + n_found[hit].astype(str)
        ),
    )
    line_rejects = reason.dropna()

    # 3. Parse the accepted lines.
    good = text[reason.isna()]
    # pyarrow's parser is the fast one; it always honours quotes, so an unquoted dialect takes the C parser.
    how = {"engine": "pyarrow"} if quote else {"engine": "c", "quoting": csv.QUOTE_NONE}
    if len(good):
        data = io.BytesIO("\n".join(good.tolist()).encode())
        fields = pd.read_csv(data, header=None, names=columns, dtype=str, keep_default_na=False, **how)
    else:
        fields = pd.DataFrame({c: pd.Series(dtype=str) for c in columns})
    fields.index = good.index

    # 4. Typed rows and row checks.
    rows, why, nan = _taobao_rows(fields) if taobao else _canonical_rows(fields)
    _common_checks(rows, why, nan, now)
    row_rejects = why.dropna()
    rows = rows[why.isna()]

    # 5. Exact dedupe of records: the raw text of the lines that passed every check.
    dup = text.loc[rows.index].duplicated()
    dup_rejects = pd.Series(DUPLICATE, index=rows.index[dup.to_numpy()], dtype=object)
    rows = rows[~dup]

    # 6. seq per user (or request for anonymous rows), by ts then input order.
    rows["__key"] = rows["user_id"].fillna("\x00request:" + rows["request_id"])
    rows["__line"] = rows.index.to_numpy()
    rows = rows.sort_values(["__key", "ts", "__line"], na_position="last", kind="stable")
    rows["seq"] = rows.groupby("__key", sort=False).cumcount().astype("int64")

    # 7. Id maps and side tables (first appearance = input order).
    by_line = rows.sort_values("__line")
    users = pd.unique(by_line["user_id"].dropna())
    items = pd.unique(by_line["item_id"])
    last_cat = by_line.dropna(subset=["category"]).drop_duplicates("item_id", keep="last")
    item_cat = pd.Series(last_cat["category"].to_numpy(), index=last_cat["item_id"].to_numpy())

    # 8. Write.
    out.mkdir(parents=True, exist_ok=True)
    all_rejects = pd.concat([line_rejects, row_rejects, dup_rejects]).sort_index()
    rejects = pd.DataFrame(
        {
            "ingest_id": "pandas",
            "file": str(path),
            "line": all_rejects.index.to_numpy(dtype="int64"),
            "raw": text.loc[all_rejects.index].to_numpy(),
            "reason": all_rejects.to_numpy(),
            # Only lines that are not valid UTF-8 carry their bytes; the benchmark's inputs have none.
            "raw_base64": pd.Series(None, index=range(len(all_rejects)), dtype=object),
        }
    )
    _write(rows[[f.name for f in INTERACTIONS]], INTERACTIONS, out / "interactions.parquet")
    _write(rejects, REJECTS, out / "rejects.parquet")
    for kind, ids in (("users", users), ("items", items)):
        idmap = pd.DataFrame({"id": ids, "index": np.arange(len(ids), dtype="int64")})
        _write(idmap, IDMAP, out / f"idmap_{kind}.parquet")
    no_attrs = pd.Series([[]] * len(items), dtype=object)
    items_df = pd.DataFrame(
        {
            "item_id": items,
            "category": item_cat.reindex(items).to_numpy(),
            "attributes": no_attrs,
            "price": np.nan,
        }
    )
    _write(items_df, ITEMS, out / "items.parquet")
    users_df = pd.DataFrame({"user_id": users, "features": pd.Series([[]] * len(users), dtype=object)})
    _write(users_df, USERS, out / "users.parquet")

    summary = {
        "rows_in": rows_in,
        "rows_rejected": len(rejects),
        "rows_written": len(rows),
        "users": len(users),
        "items": len(items),
        "events_by_type": {k: int(v) for k, v in rows["event"].value_counts().sort_index().items()},
        "ts_min": None if rows["ts"].isna().all() else rows["ts"].min().isoformat(),
        "ts_max": None if rows["ts"].isna().all() else rows["ts"].max().isoformat(),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _flag(reason: pd.Series, cond: pd.Series, msg) -> None:
    """Set ``reason`` where ``cond`` holds and no earlier check failed; ``msg``: text or f(hit) -> Series."""
    hit = cond.fillna(False).to_numpy(dtype=bool) & reason.isna().to_numpy()
    if hit.any():
        reason[hit] = msg if isinstance(msg, str) else msg(hit).to_numpy()


def _nonempty(s: pd.Series) -> pd.Series:
    """'' -> missing; anything else is kept exactly as given."""
    return s.mask(s == "")


def _padded(s: pd.Series) -> pd.Series:
    """Where a number has surrounding whitespace: ``pd.to_numeric`` accepts it, the ingest does not."""
    return s.str.strip() != s


def _number(rows: pd.DataFrame, fields: pd.DataFrame, why: pd.Series, col: str, integer: bool) -> pd.Series:
    """Parse ``col`` into ``rows``; returns where the text was a NaN literal (pandas stores NaN as missing)."""
    s = _nonempty(fields[col])
    nan = pd.Series(False, index=s.index)
    if integer:
        v = pd.to_numeric(s.where(s.str.fullmatch(r"[+-]?\d+")), errors="coerce")
        v = v.where(v.abs() <= 2**31 - 1)
        rows[col] = v.astype("Int32")
        bad = s.notna() & v.isna()
    else:
        v = pd.to_numeric(s, errors="coerce").mask(_padded(s))
        rows[col] = v
        nan = s.str.lower().isin(NAN_WORDS)
        bad = s.notna() & v.isna() & ~nan
    name = "an integer" if integer else "a number"
    _flag(why, bad, lambda hit: f"{col} '" + s[hit] + f"' is not {name}")
    return nan


def _unix_ts(s: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(ts as datetime64[us, UTC], parsed as a number) of Unix seconds."""
    secs = pd.to_numeric(s, errors="coerce").mask(_padded(s))
    us = (secs * 1_000_000).round()
    ok = (us.abs() < 2**63 - 1).to_numpy()  # NaN and inf are not ok
    vals = np.where(ok, us.fillna(0).to_numpy(), 0).astype("int64").view("datetime64[us]")
    vals[~ok] = np.datetime64("NaT")
    return pd.Series(vals, index=s.index).dt.tz_localize("UTC"), secs


def _canonical_rows(fields: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series, dict[str, pd.Series]]:
    rows = pd.DataFrame(index=fields.index)
    why = pd.Series(np.nan, index=fields.index, dtype=object)
    nan = {}
    for c in STRING_COLUMNS:
        rows[c] = (
            _nonempty(fields[c]) if c in fields.columns else pd.Series(np.nan, index=fields.index, dtype=str)
        )
    if "ts" in fields.columns:
        s = _nonempty(fields["ts"])
        ts, secs = _unix_ts(s)
        iso = s[secs.isna() & s.notna() & s.str.contains(r"(?:Z|[+-]\d\d:?\d\d)$", regex=True)]
        if len(iso):
            ts.loc[iso.index] = pd.to_datetime(iso, format="ISO8601", utc=True, errors="coerce").dt.as_unit(
                "us"
            )
        rows["ts"] = ts
        _flag(
            why,
            s.notna() & ts.isna(),
            lambda hit: "timestamp '" + s[hit] + "' is not ISO 8601 with an offset or Unix seconds",
        )
    else:
        rows["ts"] = pd.Series(pd.NaT, index=fields.index, dtype="datetime64[us, UTC]")
    for c, integer in (("value", False), ("propensity", False), ("position", True)):
        if c in fields.columns:
            nan[c] = _number(rows, fields, why, c, integer)
        else:
            rows[c] = pd.Series(
                pd.NA if integer else np.nan, index=fields.index, dtype="Int32" if integer else "float64"
            )
    return rows[ROW_COLUMNS], why, nan


def _taobao_rows(fields: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series, dict[str, pd.Series]]:
    n = fields.index
    why = pd.Series(np.nan, index=n, dtype=object)
    s = _nonempty(fields["ts"])
    ts, _ = _unix_ts(s)
    rows = pd.DataFrame(
        {
            "user_id": _nonempty(fields["user"]),
            "item_id": _nonempty(fields["item"]),
            "ts": ts,
            "event": _nonempty(fields["behavior"]).replace(TAOBAO_EVENTS),
            "value": np.nan,
            "category": _nonempty(fields["category"]),
        },
        index=n,
    )
    for c in ("session_id", "request_id", "logging_policy"):
        rows[c] = pd.Series(np.nan, index=n, dtype=str)
    rows["position"] = pd.Series(pd.NA, index=n, dtype="Int32")
    rows["propensity"] = np.nan
    _flag(why, s.notna() & ts.isna(), lambda hit: "timestamp '" + s[hit] + "' is not Unix seconds")
    _flag(why, ts.isna(), "timestamp is empty")
    return rows[ROW_COLUMNS], why, {}


def _fmt_float(v: pd.Series) -> pd.Series:
    """Floats as polars' ``pl.format`` writes them (NaN, inf)."""
    text = v.to_numpy(dtype="float64").astype(str)
    return pd.Series(np.where(text == "nan", "NaN", text), index=v.index)


def _common_checks(rows: pd.DataFrame, why: pd.Series, nan: dict[str, pd.Series], now: datetime) -> None:
    no = pd.Series(False, index=rows.index)
    ts_max = pd.Timestamp(now + timedelta(days=1))
    _flag(
        why,
        rows["user_id"].isna() & rows["request_id"].isna(),
        "user_id is empty (only anonymous rows with a request_id may omit it)",
    )
    _flag(why, rows["item_id"].isna(), "item_id is empty")
    _flag(why, rows["event"].isna(), "event is empty")
    events = ", ".join(EVENTS)
    _flag(
        why,
        rows["event"].notna() & ~rows["event"].isin(EVENTS),
        lambda hit: "unknown event '" + rows["event"][hit] + f"' (expected one of: {events})",
    )
    ts = rows["ts"]
    _flag(
        why,
        (ts < TS_MIN) | (ts > ts_max),
        lambda hit: (
            "timestamp "
            + ts[hit].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
            + f" is out of range [{TS_MIN:%Y-%m-%d}, {ts_max:%Y-%m-%d}]"
        ),
    )
    p = rows["propensity"]
    _flag(
        why,
        (p.notna() & ~((p > 0) & (p <= 1))) | nan.get("propensity", no),
        lambda hit: "propensity " + _fmt_float(p[hit]) + " is outside (0, 1]",
    )
    pos = rows["position"]
    _flag(why, pos.notna() & (pos < 1), lambda hit: "position " + pos[hit].astype(str) + " is not 1-based")
    v = rows["value"]
    _flag(
        why,
        (v.notna() & ~np.isfinite(v)) | nan.get("value", no),
        lambda hit: "value " + _fmt_float(v[hit]) + " is not finite",
    )


def _write(df: pd.DataFrame, schema: pa.Schema, path: Path) -> None:
    table = pa.Table.from_pandas(df, schema=schema, preserve_index=False)
    pq.write_table(table, path, compression="zstd")
