"""Ingest: accounting, checks, dedupe, seq, id maps, append transactions and crash safety."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipelines import ingest as ingest_mod
from data_pipelines import transaction
from data_pipelines.adapters import canonical, open_source
from data_pipelines.dataset import Dataset
from data_pipelines.ingest import ingest
from data_pipelines.schema import SEQ_KEY
from parpo_core.errors import DataError

HEADER = "user_id,item_id,ts,event,value,request_id,position,propensity\n"
GOOD = [
    "u1,i1,1700000300,click,,,,",  # line 2
    "u1,i2,1700000100,view,,,,",  # line 3: earlier ts -> seq 0
    "u2,i1,2023-11-14T22:15:00+00:00,buy,19.5,,,",  # line 4
    ",i3,1700000000,impression,0,r1,1,0.5",  # line 5: anonymous with request id
    "u1,i3,1700000200,cart,,,,",  # line 6
]
BAD = {
    7: (",i1,1700000000,click,,,,", "user_id is empty"),
    8: ("u3,,1700000000,click,,,,", "item_id is empty"),
    9: ("u3,i1,not-a-time,click,,,,", "timestamp 'not-a-time' is not ISO 8601"),
    10: ("u3,i1,100,click,,,,", "out of range"),
    11: ("u3,i1,1700000000,purchase,,,,", "unknown event 'purchase'"),
    12: ("u3,i1,1700000000,click,,r2,1,1.5", "propensity 1.5 is outside (0, 1]"),
    13: ("u3,i1,1700000000,click,,r2,0,0.5", "position 0 is not 1-based"),
    14: ("u1,i1,1700000300,click,,,,", "exact duplicate"),
    15: ("u3,i1,1700000000,click", "ragged line"),
}


def write_csv(path: Path, lines: list[str]) -> Path:
    path.write_text(HEADER + "\n".join(lines) + "\n")
    return path


@pytest.fixture
def first(tmp_path):
    src = write_csv(tmp_path / "a.csv", GOOD + [v[0] for v in BAD.values()])
    out = tmp_path / "ds"
    summary = ingest(canonical.source(src), out)
    return out, summary


def test_accounting_and_reasons(first):
    out, s = first
    assert s["rows_in"] == len(GOOD) + len(BAD) == s["rows_accepted"] + s["rows_rejected"]
    assert (s["rows_accepted"], s["rows_rejected"], s["rows_written"]) == (5, 9, 5)
    assert (s["users"], s["items"]) == (2, 3)
    assert s["events_by_type"] == {"buy": 1, "cart": 1, "click": 1, "impression": 1, "view": 1}
    assert s["ts_min"] == "2023-11-14T22:13:20+00:00"
    rejects = pl.read_parquet(out / "rejects").sort("line")
    assert rejects["line"].to_list() == list(BAD)
    for (line, (raw, why)), got_raw, got_why in zip(
        BAD.items(), rejects["raw"], rejects["reason"], strict=True
    ):
        assert got_raw == raw, line
        assert why in got_why, (line, got_why)
    assert json.loads((out / "summary.json").read_text())["rows_in"] == 14


def test_seq_orders_by_ts_then_input_and_requests_for_anonymous(first):
    out, _ = first
    df = Dataset(out).interactions().collect().sort("user_id", "seq", nulls_last=True)
    u1 = df.filter(pl.col("user_id") == "u1")
    assert u1["item_id"].to_list() == ["i2", "i3", "i1"] and u1["seq"].to_list() == [0, 1, 2]
    anon = df.filter(pl.col("user_id").is_null())
    assert anon["request_id"].to_list() == ["r1"] and anon["seq"].to_list() == [0]
    assert anon["propensity"].to_list() == [0.5] and anon["position"].to_list() == [1]
    assert df.schema["ts"] == pl.Datetime("us", "UTC")


def test_append_is_a_transaction_with_stable_ids(first, tmp_path):
    out, _ = first
    ds = Dataset(out)
    users_before, items_before = ds.idmap("users"), ds.idmap("items")
    more = write_csv(tmp_path / "b.csv", ["u9,i9,1700000400,click,,,,", "u1,i9,1700000050,fav,,,,", GOOD[0]])
    s = ingest(canonical.source(more), out)
    assert (s["rows_in"], s["rows_accepted"], s["rows_rejected"]) == (17, 7, 10)  # cumulative
    ds2 = Dataset(out)
    users, items = ds2.idmap("users"), ds2.idmap("items")
    assert users.head(users_before.height).equals(users_before)
    assert items.head(items_before.height).equals(items_before)
    assert users["id"].to_list() == ["u1", "u2", "u9"] and users["index"].to_list() == [0, 1, 2]
    u1 = ds2.interactions().filter(pl.col("user_id") == "u1").collect().sort("seq")
    # Appended events get larger seq even when their ts is older.
    assert u1["item_id"].to_list() == ["i2", "i3", "i1", "i9"] and u1["seq"].to_list() == [0, 1, 2, 3]
    last = pl.read_parquet(out / s["ingests"][-1]["rejects"])
    assert last["reason"].to_list() == ["exact duplicate of an earlier record"]
    assert len(ds2.manifest["partitions"]) == 2


def _seq_reference(df: pl.DataFrame, base: dict[str, int]) -> dict[int, int]:
    """line -> seq, worked out row by row: per key, by ts (nulls last), then line."""
    by_key: dict[str, list[tuple]] = {}
    for r in df.iter_rows(named=True):
        key = r["user_id"] if r["user_id"] is not None else "\x00request:" + r["request_id"]
        by_key.setdefault(key, []).append((r["ts"] is None, r["ts"] or 0, r["__line"]))
    return {
        line: base.get(key, 0) + i
        for key, rows in by_key.items()
        for i, (_, _, line) in enumerate(sorted(rows))
    }


@pytest.mark.parametrize("ts_backwards", [False, True])
def test_seq_runs_match_a_row_by_row_count_even_when_keys_share_a_hash(ts_backwards):
    rng = np.random.default_rng(3)
    n = 400
    users = rng.integers(0, 30, n)
    ts = np.arange(n) * 10 if not ts_backwards else rng.integers(0, 50, n)
    df = pl.DataFrame(
        {
            "user_id": [None if u < 3 else f"u{u}" for u in users],
            "request_id": [f"r{u}" for u in users],
            "ts": pl.Series(ts * 1_000_000).cast(pl.Datetime("us", "UTC")),
            "__line": np.arange(2, n + 2),
        }
    ).with_columns(ts=pl.when(pl.col("__line") % 17 == 0).then(None).otherwise(pl.col("ts")))
    next_seq = pl.DataFrame({"__key": ["u5", "\x00request:r1"], "__base": [7, 2]})
    want = _seq_reference(df, dict(next_seq.iter_rows()))
    keyed = df.with_columns(SEQ_KEY)
    # 3 hash values for ~30 keys: every run interleaves keys, so only the per-key count is right.
    for got in (
        ingest_mod._assign_seq(df, next_seq),
        ingest_mod._seq_by_hash(keyed.with_columns(__h=pl.col("__key").hash(11) % 3), next_seq),
    ):
        assert dict(got.select("__line", "seq").iter_rows()) == want


def test_reingesting_the_same_file_is_a_noop(first, tmp_path):
    out, _ = first
    before = (out / "manifest.json").read_bytes()
    s = ingest(canonical.source(tmp_path / "a.csv"), out)
    assert s["noop"] is True
    assert (out / "manifest.json").read_bytes() == before


def _listing(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_crash_between_partitions_and_id_maps_leaves_dir_as_it_was(first, tmp_path, monkeypatch):
    out, _ = first
    before = _listing(out)
    more = write_csv(tmp_path / "b.csv", ["u9,i9,1700000400,click,,,,"])

    def crash(*args, **kwargs):
        raise OSError("disk full (injected)")

    monkeypatch.setattr(ingest_mod, "_side_tables", crash)  # runs after the partitions are staged
    with pytest.raises(OSError, match="injected"):
        ingest(canonical.source(more), out)
    assert _listing(out) == before
    assert not list(out.glob(".txn-*"))


def test_crash_after_commit_point_rolls_forward(first, tmp_path, monkeypatch):
    out, _ = first
    more = write_csv(tmp_path / "b.csv", ["u9,i9,1700000400,click,,,,"])
    real = transaction.apply_pending

    def killed_after_commit(root):
        if (transaction.read_manifest(root) or {}).get("pending"):
            raise OSError("killed")
        real(root)

    monkeypatch.setattr(transaction, "apply_pending", killed_after_commit)
    with pytest.raises(OSError, match="killed"):
        ingest(canonical.source(more), out)
    assert json.loads((out / "manifest.json").read_text())["pending"]
    monkeypatch.setattr(transaction, "apply_pending", real)
    ds = Dataset(out)  # opening recovers: the committed ingest is rolled forward
    assert "pending" not in ds.manifest
    assert ds.idmap("users")["id"].to_list() == ["u1", "u2", "u9"]
    assert ds.interactions().select(pl.len()).collect().item() == 6
    assert not list(out.glob(".txn-*"))


def test_not_the_declared_format_is_one_clear_error(tmp_path):
    junk = tmp_path / "x.csv"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00binary" * 20)
    with pytest.raises(DataError, match="does not look like 'taobao' input"):
        ingest(open_source("taobao", junk), tmp_path / "out")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_one_source_per_dataset(first, tmp_path):
    out, _ = first
    tb = tmp_path / "t.csv"
    tb.write_text("1,2,3,pv,1511658000\n")
    with pytest.raises(DataError, match="one source per dataset folder"):
        ingest(open_source("taobao", tb), out)


def test_mapping_file_reads_a_shop_export(tmp_path):
    export = tmp_path / "shop.csv"
    export.write_text(
        "customer;sku;when;action;amount\n"
        "c1;s1;2024-03-01 10:00:00;pageview;\n"
        "c1;s2;2024-03-01 10:05:00;addtocart;\n"
        "c2;s1;2024-03-02 09:00:00;transaction;42.5\n"
        "c2;s1;2024-03-02 25:00:00;transaction;1\n"
    )
    mapping = tmp_path / "map.yaml"
    mapping.write_text(
        "separator: ';'\n"
        "columns: {customer: user_id, sku: item_id, when: ts, action: event, amount: value}\n"
        "events: {pageview: view, addtocart: cart, transaction: buy}\n"
        "timestamp: '%Y-%m-%d %H:%M:%S'\n"
    )
    s = ingest(canonical.source(export, mapping), tmp_path / "ds")
    assert (s["rows_in"], s["rows_accepted"], s["rows_rejected"]) == (4, 3, 1)
    assert s["events_by_type"] == {"buy": 1, "cart": 1, "view": 1}
    df = Dataset(tmp_path / "ds").interactions().collect().sort("user_id", "seq")
    assert df["value"].to_list() == [None, None, 42.5]
    assert df["ts"].dt.to_string("%Y-%m-%dT%H:%M").to_list()[2] == "2024-03-02T09:00"
    bad = pl.read_parquet(tmp_path / "ds" / "rejects")
    assert "is not in the format" in bad["reason"][0]


def test_bad_mapping_names_the_key(tmp_path):
    export = tmp_path / "shop.csv"
    export.write_text("a,b,c\n1,2,view\n")
    mapping = tmp_path / "map.yaml"
    mapping.write_text("columns: {a: user_id, b: itemid, c: event}\n")
    with pytest.raises(DataError, match=r"map.yaml: columns: .*unknown canonical column\(s\) \['itemid'\]"):
        canonical.source(export, mapping)
    mapping.write_text("colums: {a: user_id}\n")
    with pytest.raises(DataError, match="map.yaml: colums: Extra inputs are not permitted"):
        canonical.source(export, mapping)


def test_parquet_input_round_trips(first, tmp_path):
    out, _ = first
    pq_in = tmp_path / "in.parquet"
    Dataset(out).interactions().collect().write_parquet(pq_in)
    s = ingest(canonical.source(pq_in), tmp_path / "copy")
    assert (s["rows_in"], s["rows_rejected"]) == (5, 0)
    a = Dataset(out).interactions().collect().sort("item_id", "event")
    b = Dataset(tmp_path / "copy").interactions().collect().sort("item_id", "event")
    assert a.drop("seq").equals(b.drop("seq"))


good_line = st.builds(
    lambda u, i, t, e: f"u{u},i{i},{1_700_000_000 + t},{e},,,,",
    st.integers(0, 5),
    st.integers(0, 5),
    st.integers(0, 10),
    st.sampled_from(["view", "click", "buy"]),
)
corruption = st.sampled_from(
    [
        "u1,i1,17000x,click,,,,",
        "u1,,1700000000,view,,,,",
        'u1,"i1,1700000000,view,,,,',
        "u1,i1",
        "",
        "u1,i1,1700000000,teleport,,,,",
        "u1,i1,1700000000,view,nan,,,",
        "u1,i1,1700000000,view,,r,1,0",
        "u1,i1,1700000000,view,,,,,,,",
        '"u1","i1","1700000000","view","","","",""',
    ]
)


@settings(max_examples=25, deadline=None)
@given(lines=st.lists(st.one_of(good_line, corruption), min_size=1, max_size=40))
def test_corrupted_files_are_fully_accounted_for(tmp_path_factory, lines):
    """Every input line is either a canonical row or a reject; nothing is lost or invented."""
    tmp = tmp_path_factory.mktemp("ing")
    src = write_csv(tmp / "in.csv", lines)
    try:
        s = ingest(canonical.source(src), tmp / "ds")
    except DataError as e:  # a file with no valid line at all is refused whole
        assert "does not look like" in str(e)
        assert not (tmp / "ds" / "manifest.json").exists()
        return
    assert s["rows_in"] == len(lines) == s["rows_accepted"] + s["rows_rejected"]
    rejects = pl.read_parquet(tmp / "ds" / "rejects")
    assert rejects.height == s["rows_rejected"] and rejects["reason"].null_count() == 0
    assert sorted(rejects["line"].to_list()) == sorted(set(rejects["line"].to_list()))
    assert all(rejects["raw"][k] == lines[line - 2] for k, line in enumerate(rejects["line"].to_list()))
    assert Dataset(tmp / "ds").interactions().select(pl.len()).collect().item() == s["rows_accepted"]


def test_bom_and_invalid_utf8_keep_the_first_id_clean_and_the_bytes_in_rejects(tmp_path):
    """Issue 15 point 8: the BOM leaked into the first id when the file also had an invalid
    UTF-8 line, and rejects kept that line with U+FFFD instead of its bytes."""
    bad = b"u2,i\xe9,1700000001,click,,,,\r"  # latin-1 é, CRLF
    src = tmp_path / "a.csv"
    src.write_bytes(b"\xef\xbb\xbf" + HEADER.encode() + b"u1,i1,1700000000,click,,,,\n" + bad + b"\n")
    s = ingest(canonical.source(src), tmp_path / "ds")
    ds = Dataset(tmp_path / "ds")
    assert ds.idmap("users")["id"].to_list() == ["u1"]
    rejects = pl.read_parquet(tmp_path / "ds" / s["ingests"][-1]["rejects"])
    assert rejects.select("line", "raw", "reason").rows() == [
        (3, "u2,i\ufffd,1700000001,click,,,,", "line is not valid UTF-8")
    ]
    assert base64.b64decode(rejects["raw_base64"][0]) == bad
