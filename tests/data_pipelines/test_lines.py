"""The physical-line reader: every line is either a record or a reject with a reason."""

from __future__ import annotations

import base64
import csv
import io

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipelines.lines import LINE, Dialect, _exact_path, parse_chunk, read_chunks, read_header, read_text

D3 = Dialect(("a", "b", "c"))


def test_reasons_for_each_kind_of_bad_line():
    data = b'1,2,3\n4,5\n\n"x,y",2,3\n"bad,2,3\n7,8,9,10\r\n1,"q""q",3\r\n\xff,1,2\nlast,1,2'
    chunk = parse_chunk(data, D3, first_line=2)
    assert chunk.n_lines == 9
    assert chunk.fields[LINE].to_list() == [2, 5, 8, 10]
    assert chunk.fields["a"].to_list() == ["1", "x,y", "1", "last"]
    assert chunk.fields["b"].to_list() == ["2", "2", 'q"q', "1"]
    rejects = dict(zip(chunk.rejects["line"].to_list(), chunk.rejects["reason"].to_list(), strict=True))
    assert rejects[3] == "ragged line: expected 3 fields, found 2"
    assert rejects[4] == "empty line"
    assert rejects[6].startswith("broken quoting")
    assert rejects[7] == "ragged line: expected 3 fields, found 4"
    assert rejects[9] == "line is not valid UTF-8"
    raw = dict(zip(chunk.rejects["line"].to_list(), chunk.rejects["raw"].to_list(), strict=True))
    assert raw[7] == "7,8,9,10" and raw[6] == '"bad,2,3' and raw[9] == "\ufffd,1,2"


def test_quoted_field_cannot_span_lines():
    chunk = parse_chunk(b'1,"two\nlines",3\n4,5,6\n', D3, 1)
    assert chunk.fields[LINE].to_list() == [3]
    assert sorted(chunk.rejects["line"].to_list()) == [1, 2]


def test_fast_path_equals_exact_path_on_clean_data():
    data = b"".join(f"u{i},i{i % 7},{i * 3}\n".encode() for i in range(500))
    fast, exact = parse_chunk(data, D3, 2), _exact_path(data, D3, 2)
    assert fast.fields.select(LINE, "a", "b", "c").equals(exact.fields.select(LINE, "a", "b", "c"))
    assert fast.n_lines == exact.n_lines == 500
    # The raw text of the fast path reproduces the line exactly.
    assert fast.fields.select(fast.raw)[:, 0].to_list()[:2] == ["u0,i0,0", "u1,i1,3"]


def test_chunks_cut_at_line_boundaries(tmp_path):
    p = tmp_path / "x.csv"
    p.write_bytes(b"h1,h2,h3\n" + b"".join(f"{i},{i},{i}\n".encode() for i in range(1000)) + b"9,9")
    chunks = list(read_chunks(p, Dialect(("a", "b", "c"), header=True), chunk_bytes=97))
    lines = pl.concat([c.fields.select(LINE) for c in chunks])[LINE].to_list()
    rejected = pl.concat([c.rejects for c in chunks])
    assert sum(c.n_lines for c in chunks) == 1001
    assert lines == list(range(2, 1002))
    assert rejected["line"].to_list() == [1002] and rejected["raw"].to_list() == ["9,9"]


cell = st.text(alphabet='ab,"\n x\x00é', max_size=6)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.lists(cell, min_size=1, max_size=5), min_size=1, max_size=30),
    chunk_bytes=st.integers(5, 200),
)
def test_random_corruption_is_fully_accounted_for(tmp_path_factory, rows, chunk_bytes):
    """Every physical line ends up in fields or rejects, exactly once; good lines parse like csv."""
    text = "\n".join(",".join(r) for r in rows) + "\n"
    path = tmp_path_factory.mktemp("c") / "f.csv"
    path.write_bytes(text.encode())
    chunks = list(read_chunks(path, D3, chunk_bytes=chunk_bytes))
    n_lines = text.encode().count(b"\n")
    accepted = pl.concat([c.fields.select(LINE, "a", "b", "c") for c in chunks])
    rejected = pl.concat([c.rejects for c in chunks])
    assert sum(c.n_lines for c in chunks) == n_lines
    assert sorted(accepted[LINE].to_list() + rejected["line"].to_list()) == list(range(1, n_lines + 1))
    assert rejected["reason"].null_count() == 0
    physical = text.encode().split(b"\n")
    for line_no, a, b, c in accepted.iter_rows():
        raw = physical[line_no - 1].decode().removesuffix("\r")
        assert next(csv.reader(io.StringIO(raw))) == [a, b, c]


BOM = b"\xef\xbb\xbf"


def test_a_byte_order_mark_is_dropped_on_every_path(tmp_path):
    """Issue 15 point 8: with an invalid UTF-8 line in the chunk (Arrow's split, not polars'
    reader), the BOM leaked into the first id."""
    cases = {
        "fast path": (D3, b"u1,i1,3\nu2,i2,4\n"),
        "exact path, invalid UTF-8": (D3, b"u1,i1,3\n\xff,1,2\n"),
        "exact path, quotes": (D3, b'u1,i1,3\n"x",1,2\n'),
        "whole lines, invalid UTF-8": (Dialect(None, separator="\x1f", quote=None), b"u1\n\xff\n"),
    }
    for name, (dialect, body) in cases.items():
        path = tmp_path / "f.csv"
        path.write_bytes(BOM + body)
        (chunk,) = list(read_chunks(path, dialect))
        first = chunk.fields[dialect.columns[0] if dialect.columns else "__text"][0]
        assert first == "u1", name
    path.write_bytes(BOM + b"user_id,item_id\nu1,i1\n\xfe,i2\n")
    with_header = Dialect(("user_id", "item_id"), header=True)
    assert read_header(path, with_header) == ["user_id", "item_id"]
    (chunk,) = list(read_chunks(path, with_header))
    assert chunk.fields["user_id"].to_list() == ["u1"] and chunk.rejects["line"].to_list() == [3]
    path.write_bytes(BOM + b"a\nb\n")
    assert read_text(path) == "a\nb\n"


line_bytes = st.lists(
    st.sampled_from([b"a", b",", b'"', b" ", b"\xff", b"\xc3", b"\xc3\xa9", b"\x00"]), max_size=8
)


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(line_bytes.map(b"".join), min_size=1, max_size=30), chunk_bytes=st.integers(5, 200))
def test_rejects_keep_the_bytes_a_fixed_file_is_rebuilt_from(tmp_path_factory, lines, chunk_bytes):
    """Accepted lines' raw text and rejected lines' raw text, or their base64 bytes where the
    text is not UTF-8, give back the file byte for byte."""
    data = b"\n".join(lines) + b"\n"
    path = tmp_path_factory.mktemp("r") / "f.csv"
    path.write_bytes(data)
    rebuilt: dict[int, bytes] = {}
    for chunk in read_chunks(path, D3, chunk_bytes=chunk_bytes):
        for line, raw in chunk.fields.select(LINE, chunk.raw.alias("raw")).iter_rows():
            rebuilt[line] = raw.encode()
        for r in chunk.rejects.iter_rows(named=True):
            assert (r["raw_base64"] is not None) == (r["reason"] == "line is not valid UTF-8")
            rebuilt[r["line"]] = base64.b64decode(r["raw_base64"]) if r["raw_base64"] else r["raw"].encode()
    assert b"".join(rebuilt[i] + b"\n" for i in sorted(rebuilt)) == data
