"""POST /v1/events and the logs under it: fsync before 2xx, flags, idempotency, restarts."""

from __future__ import annotations

import asyncio
import os

import polars as pl

from parpo_core.records import DecisionRecord, SlateEntry
from serving.config import LogConfig
from serving.decisions import DecisionLog
from serving.events import EventLog
from serving.schemas import Event
from serving.segments import read_records
from tests.serving.helpers import client, wait_ready


def test_events_are_fsynced_before_the_answer_and_flagged(serve_registry, tmp_path, monkeypatch):
    reg, _ = serve_registry
    ev = tmp_path / "ev"
    synced: list[int] = []  # event records on disk at each fsync of the event log
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        if "/events/" in path:
            synced.append(sum(1 for _ in read_records(ev / "events")))

    monkeypatch.setattr("serving.segments.os.fsync", fsync)
    with client(reg, ev) as c:
        wait_ready(c)
        slate = c.post("/v1/act", json={"request_id": "r1", "user_id": "u0001", "k": 3}).json()["slate"]
        first = slate[0]["item_id"]
        one = c.post(
            "/v1/events", json={"request_id": "r1", "position": 1, "event": "click", "event_id": "e1"}
        )
        assert one.status_code == 200
        # Answered only after a commit that had the record on disk.
        assert synced and synced[-1] >= 1
        batch = c.post("/v1/events", json={"events": [
            {"request_id": "r1", "position": 1, "event": "click", "event_id": "e1"},   # repeat of e1
            {"request_id": "r1", "position": 1, "event": "click", "event_id": "e2"},   # duplicate
            {"request_id": "r1", "position": 2, "event": "buy", "item_id": "not-it"},   # mismatch
            {"request_id": "r1", "position": 1, "event": "cart", "item_id": first},     # fine
            {"request_id": "ghost", "position": 1, "event": "impression"},              # unknown request
        ]}).json()  # fmt: skip
        assert synced[-1] >= 5
        flags = [
            (r["stored"], r["duplicate"], r["item_mismatch"], r["unknown_request"]) for r in batch["results"]
        ]
        assert flags == [
            (False, False, False, False),
            (True, True, False, False),
            (True, False, True, False),
            (True, False, False, False),
            (True, False, False, True),
        ]
        assert batch["accepted"] == 5
        bad = c.post("/v1/events", json={"events": [{"request_id": "r1", "position": 1, "event": "like"}]})
        assert bad.status_code == 422 and "event" in bad.json()["error"]
        too_many = [{"request_id": "r", "position": 1, "event": "click"}] * 1001
        assert c.post("/v1/events", json={"events": too_many}).status_code == 422
    records = list(read_records(ev / "events"))
    assert len(records) == 5  # every accepted event once; the repeated event_id is not stored twice
    assert [r["event_id"] for r in records].count("e1") == 1
    assert records[2]["logged_item_id"] == slate[1]["item_id"] and records[2]["item_mismatch"] is True


def test_acknowledged_events_survive_a_writer_crash_and_ids_stay_idempotent(tmp_path):
    cfg = LogConfig(commit_interval_ms=0.5)

    async def first_life() -> list[str]:
        decisions = DecisionLog(tmp_path, cfg)
        decisions.record(DecisionRecord(
            ts=0.0, request_id="r1", user_id="u", request={}, k=1, policy_version="v1", reward_version="v1",
            explore=1.0, n_samples=1, evaluable=True, plan="recommend", cold_user=False,
            slate=[SlateEntry(item_id="i1", position=1, propensity=0.5)],
        ))  # fmt: skip
        log = EventLog(tmp_path, cfg, decisions)
        acked: list[str] = []

        async def send(i: int) -> None:
            await log.submit([Event(request_id="r1", position=1, event="click", event_id=f"e{i}")])
            acked.append(f"e{i}")

        await asyncio.gather(*(send(i) for i in range(200)))
        # No close(): the process "dies" here, with whatever was not acknowledged still queued.
        return acked

    acked = asyncio.run(first_life())
    on_disk = [r["event_id"] for r in read_records(tmp_path / "events")]
    assert set(acked) <= set(on_disk) and len(acked) == 200

    async def second_life() -> list[bool]:
        decisions = DecisionLog(tmp_path, cfg)  # rebuilt from the segments
        log = EventLog(tmp_path, cfg, decisions)
        again = await log.submit([Event(request_id="r1", position=1, event="click", event_id="e7"),
                                  Event(request_id="r1", position=1, event="click", event_id="new")])  # fmt: skip
        log.close()
        decisions.close()
        return [r.stored for r in again] + [again[1].duplicate, again[1].unknown_request]

    assert asyncio.run(second_life()) == [False, True, True, False]
    assert len(list(read_records(tmp_path / "events"))) == 201


def test_torn_tail_is_skipped(tmp_path):
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "20260101T000000Z-1-0001.jsonl").write_bytes(
        b'{"request_id": "a", "position": 1, "event": "click"}\n{"request_id": "b", "posi'
    )
    assert [r["request_id"] for r in read_records(tmp_path / "events")] == ["a"]


def test_server_logs_ingest_into_the_canonical_dataset(serve_registry, tmp_path):
    """The contract between the writer (serving) and the reader (data_pipelines adapter)."""
    from data_pipelines.adapters import open_source
    from data_pipelines.dataset import Dataset
    from data_pipelines.ingest import ingest

    reg, _ = serve_registry
    ev = tmp_path / "ev"
    with client(reg, ev) as c:
        wait_ready(c)
        out = c.post("/v1/act", json={"request_id": "q1", "user_id": "u0004", "k": 3}).json()
        c.post("/v1/events", json={"request_id": "q1", "position": 1, "event": "buy", "value": 19.5})
    ingest(open_source("parpo-events", ev), tmp_path / "ds")
    df = Dataset(tmp_path / "ds").interactions().collect()
    imp = df.filter(pl.col("event") == "impression").sort("position")
    assert imp["item_id"].to_list() == [s["item_id"] for s in out["slate"]]
    assert imp["propensity"].to_list() == [s["propensity"] for s in out["slate"]]
    assert set(imp["logging_policy"]) == {out["policy_version"]}
    (buy,) = df.filter(pl.col("event") == "buy").iter_rows(named=True)
    assert (buy["item_id"], buy["user_id"], buy["value"]) == (out["slate"][0]["item_id"], "u0004", 19.5)
