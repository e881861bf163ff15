"""Real disk faults for the serving logs, run in a private mount namespace (``unshare -m``) so
the mounts vanish with the process: ``python -m tests.serving.disk_scenarios full|readonly REG DIR``
prints one JSON object of what happened; ``test_disk.py`` asserts on it.

- ``full``: the events folder is a 1 MiB tmpfs with a filler leaving ~48 KiB; 8 clients post
  400 events with ids, retrying every 503; once 20 answers were 503 the filler is removed
  (space returns). Reported: ids acknowledged, records stored per id, 503s, /readyz seen.
- ``readonly``: the events folder is a tmpfs mounted read-only before the server starts; events
  and /readyz are tried (client timeout 30 s), then it is remounted read-write and the same
  event is retried.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from serving.app import create_app
from serving.runner import serve_in_thread
from serving.segments import read_records
from tests.serving.helpers import small_config

CLIENTS, EVENTS = 8, 400


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _config() -> Any:
    return small_config(log={"commit_interval_ms": 1.0, "probe_s": 0.05}, exploration={"samples": 4})


def full(reg: Path, root: Path) -> dict[str, Any]:
    ev = root / "ev"
    ev.mkdir(parents=True)
    _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(ev))
    filler = ev / "filler"
    with filler.open("wb") as f:  # tmpfs counts pages: leave about 12 of them
        f.write(b"\0" * ((1 << 20) - (48 << 10)))
    out: dict[str, Any] = {"acked": [], "n503": 0, "readyz": set(), "space_returned_after": None}

    async def client(base: str, c: int) -> None:
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            for i in range(c, EVENTS, CLIENTS):
                body = {"request_id": f"r{i}", "position": 1, "event": "click", "event_id": f"e{i}",
                        "user_id": "u" * 200, "item_id": "i" * 200}  # fmt: skip
                while True:
                    r = await http.post("/v1/events", json=body)
                    if r.status_code == 200:
                        out["acked"].append(body["event_id"])
                        break
                    assert r.status_code == 503, r.text
                    out["n503"] += 1
                    out["readyz"].add((await http.get("/readyz")).status_code)
                    if out["n503"] >= 20 and filler.exists():
                        filler.unlink()
                        out["space_returned_after"] = len(out["acked"])
                    await asyncio.sleep(0.01)

    async def run(base: str) -> None:
        await asyncio.gather(*(client(base, c) for c in range(CLIENTS)))

    with serve_in_thread(create_app(reg, events=ev, cfg=_config())) as base:
        asyncio.run(run(base))
    out["stored"] = Counter(r["event_id"] for r in read_records(ev / "events"))
    out["readyz"] = sorted(out["readyz"])
    return out


def readonly(reg: Path, root: Path) -> dict[str, Any]:
    ev = root / "ev"
    ev.mkdir(parents=True)
    _mount("-t", "tmpfs", "-o", "size=4m,ro", "tmpfs", str(ev))
    out: dict[str, Any] = {}
    body = {"request_id": "r1", "position": 1, "event": "click", "event_id": "e1"}
    app = create_app(reg, events=ev, cfg=_config())
    with serve_in_thread(app, ready=False) as base, httpx.Client(base_url=base, timeout=30) as http:
        deadline = time.monotonic() + 120
        while "decision log" not in http.get("/readyz").text or not app.state.serve.manager.current:
            assert time.monotonic() < deadline, "the model never loaded"
            time.sleep(0.05)
        ready = http.get("/readyz")
        out["readyz_ro"] = [ready.status_code, ready.json()["error"]]
        start = time.monotonic()
        r = http.post("/v1/events", json=body)
        out["events_ro"] = [r.status_code, r.json()["error"], time.monotonic() - start]
        act = http.post("/v1/act", json={"request_id": "a1", "user_id": "u0001"}).json()
        out["act_ro"] = [act["logged"], act["evaluable"], len(act["slate"])]
        _mount("-o", "remount,rw", str(ev))
        while http.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "never ready after the remount"
            time.sleep(0.05)
        out["events_rw"] = http.post("/v1/events", json=body).json()["results"][0]
    out["stored"] = Counter(r["event_id"] for r in read_records(ev / "events"))
    return out


if __name__ == "__main__":
    scenario, reg_arg, root_arg = sys.argv[1:4]
    result = {"full": full, "readonly": readonly}[scenario](Path(reg_arg), Path(root_arg))
    print(json.dumps(result, default=list))
