"""Issue 15 at the HTTP level: one bad request fails alone, a 2xx means stored exactly once,
a log that cannot be written is reported and never hangs, reload errors are visible."""

from __future__ import annotations

import errno
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import polars as pl

from parpo_core.artefacts import Registry
from serving.acting import LoadedModel
from serving.segments import read_records
from tests.serving.helpers import FaultyDisk, client, small_config, wait_ready


def _poison_user(monkeypatch, user: str = "poison") -> None:
    """Requests of ``user`` make the model raise (what a NaN in a batch did before)."""
    real = LoadedModel._task

    def task(self, r):
        if r.user_id == user:
            raise FloatingPointError("NaN in the request features")
        return real(self, r)

    monkeypatch.setattr(LoadedModel, "_task", task)


def test_a_request_the_model_cannot_answer_fails_alone(serve_registry, tmp_path, monkeypatch):
    """Point 1: one poisoned request used to fail every caller of its micro-batch (503)."""
    reg, _ = serve_registry
    _poison_user(monkeypatch)
    with client(reg, tmp_path / "ev") as c:
        wait_ready(c)
        reqs = [{"request_id": f"b{i}", "user_id": "poison" if i == 3 else "u0001", "k": 3} for i in range(8)]
        out = c.post("/v1/act:batch", json={"requests": reqs}).json()
        assert out["failed"] == 1
        bad = out["responses"][3]
        assert bad["status"] == 503 and "NaN in the request features" in bad["error"]
        assert all("slate" in r for i, r in enumerate(out["responses"]) if i != 3)
        # Concurrent single requests share micro-batches with poisoned ones: only those fail.
        bodies = [{"request_id": f"c{i}", "user_id": "poison" if i % 10 == 0 else "u0002"} for i in range(60)]
        with ThreadPoolExecutor(16) as pool:
            codes = list(pool.map(lambda b: c.post("/v1/act", json=b).status_code, bodies))
        assert [i for i, s in enumerate(codes) if s != 200] == list(range(0, 60, 10))
        assert {codes[i] for i in range(0, 60, 10)} == {503}
        metrics = c.get("/metrics").text
        assert "parpo_model_failures_total 7.0" in metrics


def test_an_acknowledged_ts_is_always_ingestible(serve_registry, tmp_path):
    """Point 2: ``ts: 1e13`` was acknowledged and then crashed the ingest of the whole folder;
    the API now takes exactly the ingest's range (its edge included)."""
    from data_pipelines.adapters import open_source
    from data_pipelines.dataset import Dataset
    from data_pipelines.ingest import ingest

    reg, _ = serve_registry
    ev = tmp_path / "ev"
    edge = (datetime.now(UTC) + timedelta(hours=23)).timestamp()
    with client(reg, ev) as c:
        wait_ready(c)
        c.post("/v1/act", json={"request_id": "q1", "user_id": "u0004", "k": 3})
        late = {"request_id": "q1", "position": 1, "event": "click", "ts": edge}
        assert c.post("/v1/events", json=late).status_code == 200
        far = c.post("/v1/events", json={**late, "ts": 1e13})
        assert far.status_code == 422 and far.json()["error"].startswith("body.ts: Value error, must be Unix")
    report = ingest(open_source("parpo-events", ev), tmp_path / "ds")
    assert report["rows_rejected"] == 0, report
    clicks = Dataset(tmp_path / "ds").interactions().collect().filter(pl.col("event") == "click")
    assert clicks["ts"].dt.epoch("s").to_list() == [int(edge)]


def test_a_failed_event_write_never_makes_its_retry_a_duplicate(serve_registry, tmp_path, monkeypatch):
    """Points 3 and 5: the dedupe key entered ``seen`` before the write, so the retry of a 503
    was stored as a duplicate (and rejected at ingest); a batch answered 5xx had its earlier
    events stored. Now a batch is one unit and the dedupe state follows the write."""
    reg, _ = serve_registry
    ev = tmp_path / "ev"
    disk = FaultyDisk(ev / "events").install(monkeypatch)
    batch = {"events": [{"request_id": "q1", "position": p, "event": "click", "event_id": f"e{p}"}
                        for p in (1, 2, 3)]}  # fmt: skip
    with client(reg, ev) as c:
        wait_ready(c)
        c.post("/v1/act", json={"request_id": "q1", "user_id": "u0004", "k": 3})
        disk.error = errno.ENOSPC
        failed = c.post("/v1/events", json=batch)
        assert failed.status_code == 503 and "nothing of this request stored" in failed.json()["error"]
        lone = {"request_id": "q1", "position": 1, "event": "cart"}  # no event_id: only its key dedupes
        assert c.post("/v1/events", json=lone).status_code == 503
        disk.error = None
        again = c.post("/v1/events", json=batch).json()["results"]
        assert [(r["stored"], r["duplicate"]) for r in again] == [(True, False)] * 3
        assert c.post("/v1/events", json=lone).json()["results"][0]["duplicate"] is False
        repeat = c.post("/v1/events", json=batch).json()["results"]  # an idempotent repeat
        assert [(r["stored"], r["duplicate"]) for r in repeat] == [(False, False)] * 3
    stored = list(read_records(ev / "events"))
    assert sorted((r["event_id"] or "-", r["duplicate"]) for r in stored) == [
        ("-", False), ("e1", False), ("e2", False), ("e3", False)]  # fmt: skip


def test_an_events_folder_that_cannot_be_written_is_reported_not_hung(serve_registry, tmp_path, monkeypatch):
    """Point 4: the writer thread died on a folder it could not open; /v1/events hung, /readyz
    stayed 200 and /v1/act dropped its decisions silently."""
    reg, _ = serve_registry
    ev = tmp_path / "ev"
    disk = FaultyDisk(ev).install(monkeypatch)
    cfg = small_config(log={"commit_interval_ms": 1.0, "probe_s": 0.05})
    with client(reg, ev, cfg=cfg) as c:
        wait_ready(c)
        disk.error = errno.EROFS
        start = time.monotonic()
        r = c.post("/v1/events", json={"request_id": "x", "position": 1, "event": "click"})
        assert r.status_code == 503 and "Read-only file system" in r.json()["error"]
        assert time.monotonic() - start < 30
        first = c.post("/v1/act", json={"request_id": "a1", "user_id": "u0001"})  # its write fails
        assert first.status_code == 200
        # The decision is not awaited (on_failure: serve): its failed commit lands a moment later.
        deadline = time.monotonic() + 30
        while "decision log" not in (ready := c.get("/readyz")).text:
            assert time.monotonic() < deadline, ready.text
            time.sleep(0.01)
        assert ready.status_code == 503 and "decision log cannot be written" in ready.json()["error"]
        assert "event log cannot be written" in ready.json()["error"]
        out = c.post("/v1/act", json={"request_id": "a2", "user_id": "u0001"}).json()
        assert out["logged"] is False and out["evaluable"] is False and out["slate"]
        metrics = c.get("/metrics").text
        assert 'parpo_log_write_failures_total{log="decisions"} 2.0' in metrics
        assert 'parpo_log_write_failures_total{log="events"} 1.0' in metrics
        disk.error = None
        deadline = time.monotonic() + 30
        while c.get("/readyz").status_code != 200:  # the probe notices, with no traffic
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert c.post("/v1/act", json={"request_id": "a3", "user_id": "u0001"}).json()["logged"] is True
    assert [d["request_id"] for d in read_records(ev / "decisions")] == ["a3"]


def test_decisions_on_failure_reject_answers_503(serve_registry, tmp_path, monkeypatch):
    reg, _ = serve_registry
    ev = tmp_path / "ev"
    disk = FaultyDisk(ev / "decisions").install(monkeypatch)
    with client(reg, ev, cfg=small_config(decisions={"on_failure": "reject"})) as c:
        wait_ready(c)
        disk.error = errno.EIO
        r = c.post("/v1/act", json={"request_id": "a1", "user_id": "u0001"})
        assert r.status_code == 503 and "decisions.on_failure: reject" in r.json()["error"]
        disk.error = None
        ok = c.post("/v1/act", json={"request_id": "a2", "user_id": "u0001"})
        assert ok.status_code == 200 and ok.json()["logged"] is True
    assert [d["request_id"] for d in read_records(ev / "decisions")] == ["a2"]


def test_a_reload_that_fails_verification_shows_in_v1_models(serve_registry, tmp_path, monkeypatch):
    """Point 9: reload answered 202 and the failure was only in the server's log."""
    src, (v1, v2) = serve_registry
    reg = tmp_path / "REG"
    shutil.copytree(src, reg)
    weights = next(p for p in Registry(reg).open("policy", v2).path.rglob("*") if p.is_file()
                   and p.name != "manifest.json")  # fmt: skip
    weights.write_bytes(weights.read_bytes() + b"tampered")
    monkeypatch.setenv("PARPO_ADMIN_TOKEN", "s3cret")
    with client(reg, tmp_path / "ev", policy=v1) as c:
        wait_ready(c)
        r = c.post("/v1/models/reload", json={"version": v2}, headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 202
        deadline = time.monotonic() + 60
        while (models := c.get("/v1/models").json())["last_error"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert (
            models["last_error"].startswith(f"loading {v2} failed")
            and "corrupted version" in models["last_error"]
        )
        assert models["serving"]["policy_version"] == v1  # the old one keeps serving
