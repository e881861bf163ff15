"""Read delimited text as physical lines, losing nothing.

One record is one physical line. A file is read in chunks of whole lines; each
chunk becomes a frame of string fields with its 1-based line numbers, and every
line that cannot be a record (empty, ragged, broken quoting, invalid UTF-8) is
returned as a reject with its raw text and a reason (and, for a line that is
not valid UTF-8, its bytes in base64: the text shows U+FFFD, the bytes let a
fixed file be rebuilt). ``rows_in`` of a file is the sum of ``n_lines`` over
its chunks, and every line ends up either in ``fields`` or in ``rejects``. A
UTF-8 byte order mark at the start of a file is dropped before any path sees
it (polars' reader drops it, Arrow's and Python's do not).

Fast path: a chunk without quotes, carriage returns or empty lines is parsed by
polars' CSV reader; the separator count proves that every line has exactly the
expected number of fields (polars raises on a line with more, and pads a line
with fewer, so the total alone is not enough: with no line above n-1 separators,
a total of rows * (n-1) forces every line to have exactly n-1). Any other chunk
takes the exact path, which splits lines with Arrow and checks each one.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from parpo_core.errors import DataError

LINE = "__line"
TEXT = "__text"  # the whole line, for variable-width formats
CHUNK_BYTES = 16 << 20  # bounds per-chunk memory (~0.25M lines): 5M-row peak 1.7 GB vs 2.0 GB at 64 MiB

REJECT_COLUMNS = {"line": pl.Int64, "raw": pl.String, "reason": pl.String, "raw_base64": pl.String}
BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Dialect:
    """How to cut a line into fields.

    ``columns=None`` reads each line whole into ``__text`` (variable-width formats).
    """

    columns: tuple[str, ...] | None
    separator: str = ","
    quote: str | None = '"'
    header: bool = False
    encoding: str = "utf-8"


@dataclass
class Chunk:
    fields: pl.DataFrame  # __line: Int64, then one String column per field (+ __text on the exact path)
    rejects: pl.DataFrame  # line, raw, reason
    n_lines: int
    raw: pl.Expr  # the raw line text, computed from ``fields`` (for rows rejected later)


def empty_rejects() -> pl.DataFrame:
    return pl.DataFrame(schema=REJECT_COLUMNS)


def _is_utf8(encoding: str) -> bool:
    return encoding.lower().replace("-", "").replace("_", "") in ("utf8", "utf8sig")


def _skip_bom(f: BinaryIO, encoding: str) -> None:
    """Move past a UTF-8 byte order mark at the start of ``f`` (a no-op without one)."""
    if _is_utf8(encoding) and f.read(len(BOM)) != BOM:
        f.seek(0)


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """A whole (small, side) file as text, without a UTF-8 byte order mark."""
    text = path.read_bytes().decode(encoding)
    return text.removeprefix("\ufeff") if _is_utf8(encoding) else text


def read_header(path: Path, dialect: Dialect) -> list[str]:
    """The header line's field names (unquoted, stripped)."""
    with open(path, "rb") as f:
        _skip_bom(f, dialect.encoding)
        first = f.readline()
    if not first.strip():
        raise DataError(f"{path}: empty file or empty header line")
    try:
        text = first.decode(dialect.encoding).rstrip("\r\n")
    except UnicodeDecodeError:
        raise DataError(f"{path}: header line is not valid {dialect.encoding}") from None
    names = next(_csv_reader(text, dialect))
    return [n.strip() for n in names]


def _csv_reader(text: str, dialect: Dialect):
    import csv

    return csv.reader([text], delimiter=dialect.separator, quotechar=dialect.quote or '"')


def read_chunks(path: Path, dialect: Dialect, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Chunk]:
    """Yield the data lines of ``path`` (header excluded) in chunks of whole lines."""
    line_no = 1
    with open(path, "rb") as f:
        _skip_bom(f, dialect.encoding)
        if dialect.header:
            f.readline()
            line_no = 2
        carry = b""
        while True:
            block = f.read(chunk_bytes)
            if not block:
                break
            data = carry + block
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            carry, data = data[cut + 1 :], data[: cut + 1]
            chunk = parse_chunk(data, dialect, line_no)
            line_no += chunk.n_lines
            yield chunk
        if carry:
            yield parse_chunk(carry, dialect, line_no)


def parse_chunk(data: bytes, dialect: Dialect, first_line: int) -> Chunk:
    """Parse ``data`` (whole lines; the last may lack its newline) starting at line ``first_line``."""
    fast = _fast_path(data, dialect, first_line)
    return fast if fast is not None else _exact_path(data, dialect, first_line)


def _fast_path(data: bytes, dialect: Dialect, first_line: int) -> Chunk | None:
    cols = dialect.columns
    if cols is None or dialect.encoding.lower().replace("-", "") != "utf8":
        return None
    if (dialect.quote and dialect.quote.encode() in data) or b"\r" in data or b"\n\n" in data:
        return None
    if data.startswith(b"\n"):
        return None
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    sep = dialect.separator.encode()
    if data.count(sep) != n_lines * (len(cols) - 1):
        return None
    try:
        df = pl.read_csv(
            io.BytesIO(data),
            has_header=False,
            separator=dialect.separator,
            quote_char=None,
            schema=dict.fromkeys(cols, pl.String),
            empty_string_is_null=False,
            raise_if_empty=False,
        )
    except pl.exceptions.PolarsError:
        return None  # e.g. a line with too many fields or invalid UTF-8: the exact path decides
    if df.height != n_lines:
        return None
    df = df.with_columns(pl.int_range(first_line, first_line + n_lines, dtype=pl.Int64).alias(LINE))
    raw = pl.concat_str([pl.col(c) for c in cols], separator=dialect.separator)
    return Chunk(df.select(LINE, *cols), empty_rejects(), n_lines, raw)


def _split_lines(data: bytes, dialect: Dialect) -> pl.Series:
    """Physical lines as strings; invalid UTF-8 lines become null."""
    if dialect.encoding.lower().replace("-", "") != "utf8":
        parts = data.decode(dialect.encoding).split("\n")
        if data.endswith(b"\n"):
            parts.pop()
        return pl.Series(TEXT, parts, dtype=pl.String)
    if b"\x1f" not in data:
        # polars splits lines ~3x faster than Arrow; a one-column read with a separator
        # that does not occur and no quoting keeps every line (empty ones too) verbatim.
        try:
            lines = pl.read_csv(
                io.BytesIO(data),
                has_header=False,
                separator="\x1f",
                quote_char=None,
                schema={TEXT: pl.String},
                empty_string_is_null=False,
                raise_if_empty=False,
            )[TEXT]
            if lines.len() == data.count(b"\n") + (0 if data.endswith(b"\n") else 1):
                return lines
        except pl.exceptions.PolarsError:
            pass  # invalid UTF-8: split with Arrow below, line by line where needed
    arr = pc.split_pattern(pa.array([data], pa.large_binary()), pattern=b"\n").flatten()
    if data.endswith(b"\n"):
        arr = arr.slice(0, len(arr) - 1)
    try:
        return pl.Series(TEXT, arr.cast(pa.large_string()))
    except pa.ArrowInvalid:
        # Rare: decode line by line so that only the bad lines are rejected.
        def dec(b: bytes) -> str | None:
            try:
                return b.decode("utf-8")
            except UnicodeDecodeError:
                return None

        return pl.Series(TEXT, [dec(b) for b in arr.to_pylist()], dtype=pl.String)


def _exact_path(data: bytes, dialect: Dialect, first_line: int) -> Chunk:
    text = _split_lines(data, dialect)
    n_lines = text.len()
    raw_bytes = None
    if text.null_count():
        raw_bytes = pc.split_pattern(pa.array([data], pa.large_binary()), pattern=b"\n").flatten()
    df = pl.DataFrame(
        {LINE: pl.int_range(first_line, first_line + n_lines, dtype=pl.Int64, eager=True), TEXT: text}
    ).with_columns(pl.col(TEXT).str.strip_suffix("\r"))

    reason = (
        pl.when(pl.col(TEXT).is_null())
        .then(pl.lit("line is not valid UTF-8"))
        .when(pl.col(TEXT).str.len_bytes() == 0)
        .then(pl.lit("empty line"))
    )
    cols = dialect.columns
    if cols is not None:
        sep, q = dialect.separator, dialect.quote
        quoted = pl.col(TEXT).str.contains(q, literal=True) if q else pl.lit(False)
        df = df.with_columns(quoted.fill_null(False).alias("__quoted"))
        n_found = pl.col(TEXT).str.count_matches(sep, literal=True) + 1
        df = df.with_columns(n_found.alias("__n"), pl.lit(True).alias("__ok"))
        if q and df["__quoted"].any():
            # Only lines with a quote pay for the regex: a strict field grammar, then
            # separators counted outside quoted fields; their results are written in place.
            field = f"{re.escape(q)}(?:[^{re.escape(q)}]|{re.escape(q * 2)})*{re.escape(q)}"
            plain = f"[^{re.escape(q)}{re.escape(sep)}]*"
            full = f"^(?:{field}|{plain})(?:{re.escape(sep)}(?:{field}|{plain}))*$"
            at = df["__quoted"].arg_true()
            quoted_text = df[TEXT].gather(at)
            n_quoted = quoted_text.str.replace_all(field, "").str.count_matches(sep, literal=True) + 1
            df = df.with_columns(
                df["__n"].scatter(at, n_quoted), df["__ok"].scatter(at, quoted_text.str.contains(full))
            )
        reason = (
            reason.when(~pl.col("__ok"))
            .then(pl.lit("broken quoting: unbalanced or stray quote (a quoted field cannot span lines)"))
            .when(pl.col("__n") != len(cols))
            .then(pl.format(f"ragged line: expected {len(cols)} fields, found {{}}", pl.col("__n")))
        )
    df = df.with_columns(reason.otherwise(None).alias("__reason"))

    bad = df.filter(pl.col("__reason").is_not_null())
    b64 = pl.lit(None, pl.String)
    if raw_bytes is not None and bad.height:
        # Invalid UTF-8: the text with U+FFFD for reading, the exact bytes for rebuilding.
        invalid = bad.filter(pl.col(TEXT).is_null())[LINE].to_list()
        lines = [raw_bytes[i - first_line].as_py() for i in invalid]
        bad = bad.join(
            pl.DataFrame(
                {
                    LINE: invalid,
                    "__raw": [b.decode("utf-8", errors="replace").rstrip("\r") for b in lines],
                    "__b64": [base64.b64encode(b).decode("ascii") for b in lines],
                },
                schema={LINE: pl.Int64, "__raw": pl.String, "__b64": pl.String},
            ),
            on=LINE,
            how="left",
        ).with_columns(pl.coalesce(TEXT, "__raw").alias(TEXT))
        b64 = pl.col("__b64")
    rejects = bad.select(
        pl.col(LINE).alias("line"),
        pl.col(TEXT).alias("raw"),
        pl.col("__reason").alias("reason"),
        b64.alias("raw_base64"),
    )
    good = df.filter(pl.col("__reason").is_null())
    if cols is None:
        return Chunk(good.select(LINE, TEXT), rejects, n_lines, pl.col(TEXT))
    plain_rows = good.filter(~pl.col("__quoted"))
    parts = [
        plain_rows.select(
            LINE,
            TEXT,
            pl.col(TEXT)
            .str.split_exact(dialect.separator, len(cols) - 1)
            .struct.rename_fields(list(cols))
            .alias("__f"),
        ).unnest("__f")
    ]
    quoted = good.filter(pl.col("__quoted"))
    if quoted.height:
        parsed = pl.read_csv(
            io.BytesIO("\n".join(quoted[TEXT].to_list()).encode()),
            has_header=False,
            separator=dialect.separator,
            quote_char=dialect.quote,
            schema=dict.fromkeys(cols, pl.String),
            empty_string_is_null=False,
        )
        if parsed.height != quoted.height:  # pragma: no cover - the regex above makes this impossible
            raise AssertionError("quoted lines parsed into a different number of records")
        parts.append(pl.concat([quoted.select(LINE, TEXT), parsed], how="horizontal"))
    fields = pl.concat(parts).sort(LINE)
    return Chunk(fields, rejects, n_lines, pl.col(TEXT))
