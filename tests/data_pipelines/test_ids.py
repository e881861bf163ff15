"""The id rule at ingest (``parpo_core.limits``, shared with the API): ids trimmed of white space
at their ends and counted, ids with control characters or over 256 characters rejected, and the
rule's version recorded in the manifest and checked on append."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipelines.adapters import canonical
from data_pipelines.dataset import Dataset
from data_pipelines.idrule import ID_FORBIDDEN_CHARS, TRIMMED, apply_id_rule
from data_pipelines.ingest import ingest
from data_pipelines.schema import IDMAP, to_arrow
from data_pipelines.validate import LINE, REASON, common_checks, failing_lines
from parpo_core.errors import DataError
from parpo_core.limits import ID_FORBIDDEN, ID_MAX_CHARS, ID_RULE_VERSION, id_problem

HEADER = b"user_id,item_id,ts,event,session_id,request_id\n"


def _csv(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(HEADER + b"\n".join(lines) + b"\n")
    return path


def _rejects(out: Path, summary: dict) -> dict[int, str]:
    df = pl.read_parquet(out / summary["ingests"][-1]["rejects"])
    return dict(zip(df["line"].to_list(), df["reason"].to_list(), strict=True))


def test_ids_are_trimmed_and_counted_or_rejected_with_the_rule_reason(tmp_path):
    long_item = b"i" * (ID_MAX_CHARS + 1)
    src = _csv(tmp_path / "a.csv", [
        b"u1,i1,1700000000,click,,",                  # 2 kept
        b" u1 ,\ti2,1700000001,click,,",              # 3 kept: two ids trimmed, u1 is the same user
        b"u\x002,i1,1700000002,click,,",              # 4 NUL
        b"u3,i1,1700000003,click,s\x1bx,",            # 5 ESC in a session id
        b"u3,i1,1700000004,click,,r\xc2\x851",         # 6 U+0085 (a C1 control) inside a request id
        b"u3," + long_item + b",1700000005,click,,",  # 7 257 characters
        b"   ,i1,1700000006,click,,",                 # 8 only white space: empty
        b"u4,\xc3\xa9" + b"x" * (ID_MAX_CHARS - 1) + b",1700000007,view,, r9",  # 9 kept: 256 chars, one trim
    ])  # fmt: skip
    out = tmp_path / "ds"
    s = ingest(canonical.source(src), out)
    assert _rejects(out, s) == {
        4: "user_id holds the control character U+0000 at 1",
        5: "session_id holds the control character U+001B at 1",
        6: "request_id holds the control character U+0085 at 1",
        7: f"item_id is longer than {ID_MAX_CHARS} characters ({ID_MAX_CHARS + 1})",
        8: "user_id is empty (only anonymous rows with a request_id may omit it)",
    }
    ds = Dataset(out)
    assert ds.idmap("users")["id"].to_list() == ["u1", "u4"]
    assert ds.interactions().collect().sort("ts")["item_id"].to_list()[:2] == ["i1", "i2"]
    assert ds.interactions().filter(pl.col("user_id") == "u4").collect()["request_id"].to_list() == ["r9"]
    assert (s["ids_trimmed"], s["ingests"][-1]["ids_trimmed"]) == (3, 3)  # lines 3 (two) and 9
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["id_rule_version"] == ID_RULE_VERSION == 1
    assert manifest["ingests"][-1]["ids_trimmed"] == 3


def _set_manifest(out: Path, **changes) -> None:
    m = json.loads((out / "manifest.json").read_text())
    for k, v in changes.items():
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    (out / "manifest.json").write_text(json.dumps(m))


def test_appending_under_another_id_rule_version_is_one_error_naming_both(tmp_path):
    out = tmp_path / "ds"
    ingest(canonical.source(_csv(tmp_path / "a.csv", [b"u1,i1,1700000000,click,,"])), out)
    more = _csv(tmp_path / "b.csv", [b"u2,i1,1700000001,click,,"])
    _set_manifest(out, id_rule_version=2)
    with pytest.raises(DataError) as e:
        ingest(canonical.source(more), out)
    assert str(e.value) == (
        f"{out}: ids were ingested under id rule version 2, this parpo applies version 1; ingest "
        "into a new --out (re-ingest the earlier sources there too)"
    )
    assert "\n" not in str(e.value)
    # A new dataset sharing the id maps of one under another rule: the same refusal.
    with pytest.raises(DataError, match="id rule version 2, this parpo applies version 1"):
        ingest(canonical.source(more), tmp_path / "other", share_idmaps_with=Dataset(out))


def test_a_dataset_of_an_earlier_release_is_checked_by_its_ids(tmp_path):
    """No recorded rule (release 0.1.0): ids that all follow the rule take appends (and the
    rule is recorded); one that does not makes it rule version 0, and the append is refused."""
    out = tmp_path / "ds"
    ingest(canonical.source(_csv(tmp_path / "a.csv", [b"u1,i1,1700000000,click,,"])), out)
    _set_manifest(out, id_rule_version=None)
    s = ingest(canonical.source(_csv(tmp_path / "b.csv", [b"u2,i1,1700000001,click,,"])), out)
    assert s["rows_written"] == 2
    assert json.loads((out / "manifest.json").read_text())["id_rule_version"] == 1

    _set_manifest(out, id_rule_version=None)
    users = pl.DataFrame({"id": ["u1 ", "u2"], "index": [0, 1]})  # as release 0.1.0 kept it
    import pyarrow.parquet as pq

    pq.write_table(to_arrow(users, IDMAP), out / "idmaps" / "users.parquet")
    with pytest.raises(DataError) as e:
        ingest(canonical.source(_csv(tmp_path / "c.csv", [b"u3,i1,1700000002,click,,"])), out)
    assert str(e.value).startswith(
        f"{out}: ids were ingested under id rule version 0 (e.g. user_id 'u1 ' starts or ends with "
        "white space), this parpo applies version 1"
    )
    Dataset(out).interactions().collect()  # it still loads


id_text = st.text(alphabet=st.sampled_from(list("ab é\t\n\x00\x01\x1b\x7f\x85\x9f\xa0\u3000")), max_size=8)


@settings(max_examples=300, deadline=None)
@given(ids=st.lists(st.one_of(id_text, st.just("x" * (ID_MAX_CHARS + 1))), min_size=1, max_size=20))
def test_the_vectorised_rule_is_the_shared_one(ids):
    """Trim, then ``id_problem`` (the API's rule, in Python) decides; the messages agree."""
    rows = pl.DataFrame({
        LINE: range(len(ids)), "user_id": ids, "item_id": ["i"] * len(ids), "event": ["click"] * len(ids),
        "request_id": [None] * len(ids), "ts": [None] * len(ids), "propensity": [None] * len(ids),
        "position": [None] * len(ids), "value": [None] * len(ids), REASON: [None] * len(ids),
    }, schema_overrides={"request_id": pl.String, "ts": pl.Datetime("us", "UTC"), "propensity": pl.Float64,
                         "position": pl.Int32, "value": pl.Float64, REASON: pl.String})  # fmt: skip
    checked, rule = apply_id_rule(rows)
    bad = dict(failing_lines(checked, common_checks() + rule).iter_rows())
    for i, raw in enumerate(ids):
        trimmed = raw.strip()
        want = (
            "user_id is empty (only anonymous rows with a request_id may omit it)"
            if not trimmed
            else (f"user_id {id_problem(trimmed)}" if id_problem(trimmed) else None)
        )
        assert bad.get(i) == want, (raw, bad.get(i))
    if TRIMMED in checked.columns:
        assert checked[TRIMMED].to_list() == [int(raw != raw.strip()) for raw in ids]
    else:
        assert all(raw == raw.strip() for raw in ids)


def test_the_listed_forbidden_characters_are_the_rule_s():
    """``ID_FORBIDDEN_CHARS`` (the fast path's gate) is ``ID_FORBIDDEN`` over all of Unicode,
    and none is above U+00FF (the reject message reads the code point off the last byte)."""
    every = "".join(map(chr, range(0x110000)))
    assert re.findall(ID_FORBIDDEN, every) == ID_FORBIDDEN_CHARS
    assert len(ID_FORBIDDEN_CHARS) == 65 and max(map(ord, ID_FORBIDDEN_CHARS)) == 0x9F
