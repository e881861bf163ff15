"""JSON lines decoding: one bad line never fails its neighbours, and each gets its reason."""

from __future__ import annotations

import json

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipelines.adapters.jsonl import REC, WHY, decode, explain
from data_pipelines.lines import LINE, TEXT

DTYPE = pl.Struct({"a": pl.Float64, "n": pl.Int32, "xs": pl.List(pl.Struct({"p": pl.Float64}))})
TORN = "torn"

LINES = {
    "good": '{"a": 1.5, "n": 2, "xs": [{"p": 0.5}]}',
    "sparse": '{"n": 3}',
    "torn": '{"a": 1.5, "n"',
    "nan": '{"a": NaN}',
    "inf": '{"a": 1, "xs": [{"p": 0.1}, {"p": Infinity}]}',
    "type": '{"n": "x"}',
    "array": "[1, 2]",
    "number": "7",
    "blank": "  ",
}
EXPECTED_WHY = {
    "good": None,
    "sparse": None,
    "torn": TORN,
    "nan": "a NaN is not a finite number",
    "inf": "xs[1].p Infinity is not a finite number",
    "type": 'n "x" is not an integer',
    "array": TORN,
    "number": TORN,
    "blank": TORN,
}


def frame(texts: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {LINE: range(1, len(texts) + 1), TEXT: texts}, schema={LINE: pl.Int64, TEXT: pl.String}
    )


@settings(max_examples=100, deadline=None)
@given(kinds=st.lists(st.sampled_from(sorted(LINES)), min_size=1, max_size=40))
def test_every_line_decodes_as_it_would_alone(kinds):
    out = decode(frame([LINES[k] for k in kinds]), DTYPE, TORN)
    assert out[LINE].to_list() == list(range(1, len(kinds) + 1))
    assert out[WHY].to_list() == [EXPECTED_WHY[k] for k in kinds]
    alone = {
        k: pl.Series([v]).str.json_decode(dtype=DTYPE)[0] for k, v in LINES.items() if not EXPECTED_WHY[k]
    }
    assert out[REC].to_list() == [alone.get(k) for k in kinds]


def test_a_newer_record_is_explained_by_the_precheck_before_its_fields():
    def newer(rec: dict) -> str | None:
        return "newer" if rec.get("v", 0) > 1 else None

    assert explain(json.dumps({"v": 2, "n": "x"}), DTYPE, TORN, newer) == "newer"
    assert explain(json.dumps({"v": 1, "n": "x"}), DTYPE, TORN, newer) == 'n "x" is not an integer'
