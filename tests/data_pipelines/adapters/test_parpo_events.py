"""``--source parpo-events``: server decision and event logs into canonical rows, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from data_pipelines.adapters import open_source
from data_pipelines.dataset import Dataset
from data_pipelines.ingest import ingest
from parpo_core.errors import DataError
from parpo_core.limits import ts_bounds

T0 = 1_764_500_000.0


def _decision(rid: str, user: str, items: list[str], props: list[float], **kw) -> dict:
    return {
        "kind": "decision", "schema_version": 1, "ts": T0, "request_id": rid, "user_id": user,
        "request": {"category": "shoes", "constraints": None, "text": None}, "context": None,
        "candidates": None, "k": len(items), "policy_version": "v000002", "reward_version": "v000001",
        "explore": 1.0, "n_samples": 4, "evaluable": True, "fallback": None, "plan": "search>recommend",
        "cold_user": False,
        "slate": [{"item_id": i, "position": p + 1, "propensity": q} for p, (i, q) in enumerate(zip(items, props, strict=True))],
        **kw,
    }  # fmt: skip


def _event(rid: str, pos: int, kind: str, **kw) -> dict:
    base = {"kind": "event", "schema_version": 1, "received": T0 + 5, "request_id": rid, "position": pos,
            "event": kind, "item_id": None, "user_id": None, "ts": None, "value": None, "event_id": None,
            "logged_item_id": None, "duplicate": False, "unknown_request": False, "item_mismatch": False}  # fmt: skip
    return {**base, **kw}


def _write(folder: Path, records: list[dict], torn: str = "") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in records) + torn
    (folder / "20261130T000000Z-1-ab-0001.jsonl").write_text(text)


def test_decisions_and_events_become_impressions_and_feedback(tmp_path):
    logs = tmp_path / "events"
    _write(logs / "decisions", [
        _decision("r1", "u1", ["a", "b"], [0.5, 0.25]),
        _decision("r2", "u2", ["c"], [1.0], evaluable=False, explore=0.0, n_samples=1),
        _decision("r3", "u1", ["d"], [1.0], evaluable=False, fallback="popularity"),
    ])  # fmt: skip
    _write(logs / "events", [
        _event("r1", 2, "click", logged_item_id="b", ts=T0 + 3),                # 1 kept, item from the log
        _event("r1", 2, "click", logged_item_id="b", duplicate=True),            # 2 quarantined
        _event("r1", 1, "buy", item_id="zz", logged_item_id="a", item_mismatch=True),  # 3 quarantined
        _event("ghost", 1, "click", unknown_request=True),                       # 4 quarantined: no item
        _event("ghost", 1, "cart", item_id="e", user_id="u9", unknown_request=True, value=2.0),  # 5 kept
        _event("r2", 1, "fav", logged_item_id="c"),                              # 6 kept
    ], torn='{"kind": "event", "request_id": "r1", "posi')  # fmt: skip
    summary = ingest(open_source("parpo-events", logs), tmp_path / "ds")
    df = Dataset(tmp_path / "ds").interactions().collect()
    imp = df.filter(pl.col("event") == "impression").sort("request_id", "position")
    assert imp.select(
        "request_id", "user_id", "item_id", "position", "propensity", "logging_policy", "category"
    ).rows() == [  # fmt: skip
        ("r1", "u1", "a", 1, 0.5, "v000002", "shoes"),
        ("r1", "u1", "b", 2, 0.25, "v000002", "shoes"),
        ("r2", "u2", "c", 1, 1.0, "v000002:greedy", "shoes"),
        ("r3", "u1", "d", 1, 1.0, "v000002:popularity", "shoes"),
    ]
    assert imp["ts"].dt.epoch("s").to_list() == [int(T0)] * 4
    fb = df.filter(pl.col("event") != "impression").sort("event")
    assert fb.select(
        "event", "request_id", "user_id", "item_id", "position", "propensity", "logging_policy", "value"
    ).rows() == [  # fmt: skip
        ("cart", "ghost", "u9", "e", 1, None, None, 2.0),
        ("click", "r1", "u1", "b", 2, 0.25, "v000002", None),
        ("fav", "r2", "u2", "c", 1, 1.0, "v000002:greedy", None),
    ]
    # ts: the client's when given, else the server's receive time.
    assert dict(zip(fb["event"], fb["ts"].dt.epoch("s").to_list(), strict=True)) == {
        "cart": int(T0) + 5,
        "click": int(T0) + 3,
        "fav": int(T0) + 5,
    }
    # Each decision's request, as the API received it, is a contexts row (OPE replays it).
    ctx = {
        r["request_id"]: {kv["key"]: kv["value"] for kv in r["features"]}
        for r in Dataset(tmp_path / "ds").contexts().iter_rows(named=True)
    }
    assert sorted(ctx) == ["r1", "r2", "r3"]
    assert json.loads(ctx["r1"]["request"]) == {
        "category": "shoes", "constraints": None, "text": None, "k": 2, "candidates": None
    }  # fmt: skip
    assert (ctx["r1"]["explore"], ctx["r1"]["n_samples"], ctx["r2"]["explore"]) == ("1.0", "4", "0.0")
    rejects = pl.read_parquet(tmp_path / "ds" / summary["ingests"][-1]["rejects"]).sort("line")
    assert [(r["line"], r["reason"].split(" (")[0]) for r in rejects.iter_rows(named=True)] == [
        (2, "duplicate event"),
        (3, "item_id disagrees with the logged decision"),
        (4, "unknown request id and no item_id"),
        (7, "not a JSON record"),
    ]


def test_a_folder_without_logs_is_one_error(tmp_path):
    with pytest.raises(DataError, match="no PARPO server logs"):
        open_source("parpo-events", tmp_path)


def test_a_retry_supersedes_the_first_decision_and_client_impressions_are_not_draws(tmp_path):
    logs = tmp_path / "events"
    _write(logs / "decisions", [
        _decision("r1", "u1", ["a", "b"], [0.5, 0.25]),
        _decision("r1", "u1", ["c"], [1.0], ts=T0 + 1, evaluable=False, fallback="popularity"),  # the retry
        _decision("r2", "u2", ["d"], [0.75]),
    ])  # fmt: skip
    _write(logs / "events", [
        _event("r1", 1, "click"),        # refers to the retry's c
        _event("r2", 1, "impression"),   # the client confirms the view of d
    ])  # fmt: skip
    summary = ingest(open_source("parpo-events", logs), tmp_path / "ds")
    df = Dataset(tmp_path / "ds").interactions().collect().sort("event", "request_id", "position")
    assert df.select("event", "request_id", "item_id", "propensity", "logging_policy").rows() == [
        ("click", "r1", "c", 1.0, "v000002:popularity"),
        ("impression", "r1", "c", 1.0, "v000002:popularity"),
        ("impression", "r2", "d", 0.75, "v000002"),  # the decision's row: the logged draw
        ("impression", "r2", "d", None, "v000002"),  # the client's event: no second draw
    ]
    rejects = pl.read_parquet(tmp_path / "ds" / summary["ingests"][-1]["rejects"])
    (line,) = rejects.filter(pl.col("reason").str.starts_with("superseded by a later decision"))["line"]
    assert line == 1  # the first decision's line, quarantined with its reason


def test_records_newer_than_the_reader_are_quarantined_naming_the_version(tmp_path):
    logs = tmp_path / "events"
    _write(logs / "decisions", [
        _decision("r1", "u1", ["a"], [0.5], new_optional_field="ignored"),  # same version, extra field
        _decision("r2", "u2", ["b"], [0.5], schema_version=2),
    ])  # fmt: skip
    _write(logs / "events", [
        _event("r1", 1, "click", logged_item_id="a"),
        _event("r2", 1, "click", logged_item_id="b", schema_version=2),
        {k: v for k, v in _event("r1", 1, "buy", logged_item_id="a").items() if k != "schema_version"},
    ])  # fmt: skip
    summary = ingest(open_source("parpo-events", logs), tmp_path / "ds")
    df = Dataset(tmp_path / "ds").interactions().collect()
    assert sorted(df.select("request_id", "event").rows()) == [("r1", "click"), ("r1", "impression")]
    reasons = sorted(
        r["reason"]
        for i in summary["ingests"]
        for r in pl.read_parquet(tmp_path / "ds" / i["rejects"]).to_dicts()
    )
    assert reasons == [
        "record has no schema_version (not a PARPO server record)",
        "record schema_version 2 is newer than this parpo reads (1); upgrade parpo",
        "record schema_version 2 is newer than this parpo reads (1); upgrade parpo",
    ]


def test_the_adapter_reads_only_fields_the_record_models_define():
    from data_pipelines.adapters.parpo_events import DECISION, EVENT
    from parpo_core.records import DecisionRecord, EventRecord

    for struct, model in ((DECISION, DecisionRecord), (EVENT, EventRecord)):
        assert {f.name for f in struct.fields} <= set(model.model_fields)


def _reasons(root: Path, summary: dict) -> list[tuple[str, int, str]]:
    rejects = pl.read_parquet(root / summary["ingests"][-1]["rejects"])
    return sorted(
        (Path(r["file"]).parent.name, r["line"], r["reason"]) for r in rejects.iter_rows(named=True)
    )


def test_out_of_range_values_are_rejects_with_their_reason_never_a_crash(tmp_path):
    """Issue 15 point 2: ``"ts": 1e13`` (and every other out-of-range value) crashed the ingest
    of the whole folder; each is now one quarantined line naming the field and the value."""
    logs = tmp_path / "events"
    slate = lambda pos: [{"item_id": "a", "position": pos, "propensity": 0.5}]  # noqa: E731
    _write(logs / "decisions", [
        _decision("r1", "u1", ["a", "b"], [0.5, 0.25]),             # 1 kept
        _decision("r2", "u1", ["a"], [0.5], ts=1e13),                # 2 the record
        _decision("r3", "u1", ["a"], [0.5], ts=float("nan")),        # 3 NaN (no JSON, written anyway)
        _decision("r4", "u1", ["a"], [0.5], ts=float("inf")),        # 4
        _decision("r5", "u1", ["a"], [0.5], ts=0),                   # 5 Unix 0
        _decision("r6", "u1", ["a"], [0.5], slate=slate(0)),         # 6 position 0
        _decision("r7", "u1", ["a"], [0.5], slate=slate(1.5)),       # 7 truncated to 1 by a plain cast
        _decision("r8", "u1", ["a"], [0.5], slate=slate(3e9)),       # 8 null after a plain Int32 cast
        _decision("r9", "u1", ["a"], [0.5], k="x"),                  # 9 a field of the wrong type
        _decision("r10", "u1", ["a"], [0.5], evaluable=None),        # 10 sampled or greedy? unknown
    ])  # fmt: skip
    _write(logs / "events", [
        _event("r1", 1, "click", logged_item_id="a", ts=1e13),       # 1
        _event("r1", 1, "click", logged_item_id="a", value=1e13),    # 2
        _event("r1", 1, "click", logged_item_id="a", value=float("nan")),  # 3
        _event("r1", 0, "click", logged_item_id="a"),                # 4
        _event("r1", 1, "click", logged_item_id="a", received=None), # 5
        _event("r1", 2, "buy", logged_item_id="b", value=3.0),       # 6 kept
    ])  # fmt: skip
    summary = ingest(open_source("parpo-events", logs), tmp_path / "ds")
    df = Dataset(tmp_path / "ds").interactions().collect().sort("event", "position")
    assert df.select("request_id", "event", "item_id", "position", "propensity", "value").rows() == [
        ("r1", "buy", "b", 2, 0.25, 3.0),
        ("r1", "impression", "a", 1, 0.5, None),
        ("r1", "impression", "b", 2, 0.25, None),
    ]
    _, hi = ts_bounds()
    ts_range = f"is out of range [1990-01-01, {hi:%Y-%m-%d}] (Unix seconds)"
    assert _reasons(tmp_path / "ds", summary) == [
        ("decisions", 2, f"ts 10000000000000.0 {ts_range}"),
        ("decisions", 3, "ts NaN is not a finite number"),
        ("decisions", 4, "ts Infinity is not a finite number"),
        ("decisions", 5, f"ts 0.0 {ts_range}"),
        ("decisions", 6, "slate position 0.0 is not a 1-based slot number"),
        ("decisions", 7, "slate position 1.5 is not a 1-based slot number"),
        ("decisions", 8, "slate position 3000000000.0 is not a 1-based slot number"),
        ("decisions", 9, 'k "x" is not an integer'),
        ("decisions", 10, "record has no 'evaluable' field"),
        ("events", 1, f"ts 10000000000000.0 {ts_range}"),
        ("events", 2, "value 10000000000000.0 is outside [-1e12, 1e12]"),
        ("events", 3, "value NaN is not a finite number"),
        ("events", 4, "position 0.0 is not a 1-based slot number"),
        ("events", 5, "record has no 'received' field"),
    ]
    assert summary["rows_in"] == 16 and summary["rows_rejected"] == 14


def test_decisions_without_a_valid_propensity_are_rejected_not_sampled_impressions(tmp_path):
    """Issue 15 point 8: a served decision with a null propensity was ingested as a sampled
    (evaluable) impression; now the decision is rejected and its events lose nothing else."""
    logs = tmp_path / "events"
    _write(logs / "decisions", [
        _decision("r1", "u1", ["a"], [0.5]),
        _decision("r2", "u2", ["b", "c"], [0.5, None]),   # one entry without: the whole decision
        _decision("r3", "u3", ["d"], [float("nan")]),
        _decision("r4", "u4", ["e"], [0.0]),
        _decision("r5", "u5", ["f"], [1.5]),
        _decision("r6", "u6", ["g"], [None], evaluable=False, fallback="popularity"),
    ])  # fmt: skip
    _write(logs / "events", [_event("r2", 1, "click", logged_item_id="b"), _event("r1", 1, "click")])
    summary = ingest(open_source("parpo-events", logs), tmp_path / "ds")
    df = Dataset(tmp_path / "ds").interactions().collect().sort("event")
    assert df.select("request_id", "event", "item_id", "propensity", "logging_policy").rows() == [
        ("r1", "click", "a", 0.5, "v000002"),
        ("r1", "impression", "a", 0.5, "v000002"),
    ]
    assert _reasons(tmp_path / "ds", summary) == [
        ("decisions", 2, "slate position 2 has no propensity"),
        ("decisions", 3, "slate[0].propensity NaN is not a finite number"),
        ("decisions", 4, "propensity 0.0 is outside (0, 1]"),
        ("decisions", 5, "propensity 1.5 is outside (0, 1]"),
        ("decisions", 6, "slate position 1 has no propensity"),
        ("events", 1, "the request's decision was rejected and no user_id"),
    ]


def test_a_rejected_retry_does_not_supersede_the_decision_it_retried(tmp_path):
    logs = tmp_path / "events"
    _write(logs / "decisions", [
        _decision("r1", "u1", ["a"], [0.5]),
        _decision("r1", "u1", ["b"], [None], ts=T0 + 1),  # a later, broken retry
    ])  # fmt: skip
    _write(logs / "events", [_event("r1", 1, "click")])
    summary = ingest(open_source("parpo-events", logs), tmp_path / "ds")
    df = Dataset(tmp_path / "ds").interactions().collect().sort("event")
    assert df.select("event", "item_id", "propensity").rows() == [
        ("click", "a", 0.5),
        ("impression", "a", 0.5),
    ]
    assert _reasons(tmp_path / "ds", summary) == [("decisions", 2, "slate position 1 has no propensity")]
