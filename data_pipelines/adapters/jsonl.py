"""JSON lines decoded into typed columns, where one bad line never fails the others.

Decoding is vectorised (polars' ``json_decode`` with the expected dtype). Polars fails a whole
column for one line it cannot decode (a torn write, a field of the wrong type, ``NaN`` or
``Infinity``, which are no JSON), so lines that cannot be objects are set aside first, and a
chunk that still fails is halved until each bad line is alone: k bad lines among n cost about
2k log n decodes, and a clean chunk costs one. Each bad line gets its reason, naming the first
field that does not fit (``slate[0].propensity NaN is not a finite number``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import polars as pl

from data_pipelines.lines import LINE, TEXT

REC = "__rec"
WHY = "__why"

#: Called with a line's record (a dict) when it does not fit the dtype: a reason that overrides
#: the field-level one (e.g. "written by a newer version"), or None.
Precheck = Callable[[dict[str, Any]], str | None]


def decode(
    fields: pl.DataFrame, dtype: pl.Struct, not_a_record: str, precheck: Precheck | None = None
) -> pl.DataFrame:
    """``__line``, ``__rec`` (the line's record as ``dtype``; null on a rejected line) and
    ``__why`` (null, or why the line is rejected), in the order of ``fields`` (``__line``,
    ``__text``). ``not_a_record``: the reason for a line that is not a JSON object."""
    looks = pl.col(TEXT).str.strip_chars()
    looks = (looks.str.starts_with("{") & looks.str.ends_with("}")).fill_null(False)
    fields = fields.select(LINE, TEXT, looks.alias("__obj"))
    if fields["__obj"].all():
        parts = _decode(fields.drop("__obj"), dtype, not_a_record, precheck)
    else:
        parts = _decode(fields.filter("__obj").drop("__obj"), dtype, not_a_record, precheck)
        parts.append(
            fields.filter(~pl.col("__obj")).select(
                LINE, pl.lit(None, dtype).alias(REC), pl.lit(not_a_record, pl.String).alias(WHY)
            )
        )
    out = pl.concat(parts)
    return out if len(parts) == 1 else out.sort(LINE)


def _decode(
    fields: pl.DataFrame, dtype: pl.Struct, not_a_record: str, precheck: Precheck | None
) -> list[pl.DataFrame]:
    try:
        return [
            fields.select(
                LINE, pl.col(TEXT).str.json_decode(dtype=dtype).alias(REC), pl.lit(None, pl.String).alias(WHY)
            )
        ]
    except pl.exceptions.PolarsError:
        if fields.height > 1:
            half = fields.height // 2
            return _decode(fields[:half], dtype, not_a_record, precheck) + _decode(
                fields[half:], dtype, not_a_record, precheck
            )
    why = explain(fields[TEXT][0], dtype, not_a_record, precheck)
    return [fields.select(LINE, pl.lit(None, dtype).alias(REC), pl.lit(why, pl.String).alias(WHY))]


def explain(text: str, dtype: pl.Struct, not_a_record: str, precheck: Precheck | None = None) -> str:
    """Why polars cannot decode ``text`` as ``dtype``: not a JSON object, the precheck's reason,
    or the innermost field that does not fit."""
    try:
        record = json.loads(text)
    except ValueError:
        return not_a_record
    if not isinstance(record, dict):
        return not_a_record
    if precheck is not None and (why := precheck(record)) is not None:
        return why
    path, value, want = _misfit(record, dtype, "")
    if not path:
        return f"record does not fit the expected format ({_snippet(record)})"
    return f"{path} {_snippet(value)} is not {_kind(want)}"


def _misfit(value: Any, dtype: pl.DataType, path: str) -> tuple[str, Any, pl.DataType]:
    """(path, value, dtype) of the innermost part of ``value`` that polars cannot decode."""
    if isinstance(dtype, pl.Struct) and isinstance(value, dict):
        for f in dtype.fields:
            if f.name in value and not _fits(value[f.name], f.dtype):
                return _misfit(value[f.name], f.dtype, f"{path}.{f.name}" if path else f.name)
    elif isinstance(dtype, pl.List) and isinstance(value, list):
        for i, v in enumerate(value):
            if not _fits(v, dtype.inner):
                return _misfit(v, dtype.inner, f"{path}[{i}]")
    return path, value, dtype


def _fits(value: Any, dtype: pl.DataType) -> bool:
    try:
        pl.Series([json.dumps(value)]).str.json_decode(dtype=dtype)
    except pl.exceptions.PolarsError:
        return False
    return True


def _kind(dtype: pl.DataType) -> str:
    if dtype.is_float():
        return "a finite number"
    if dtype.is_integer():
        return "an integer"
    if dtype == pl.Boolean:
        return "true or false"
    if isinstance(dtype, pl.Struct):
        return "an object"
    if isinstance(dtype, pl.List):
        return "a list"
    return "a string"


def _snippet(value: Any, n: int = 60) -> str:
    text = json.dumps(value)
    return text if len(text) <= n else text[: n - 3] + "..."
