"""Chaos: a real server on 127.0.0.1 under mixed load at 32 concurrent with 1% poisoned
requests (invalid bodies from the corpus, and requests the model cannot answer); not one
valid request may fail, and every acknowledged event is stored exactly once."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter

import httpx
import pytest

from serving.app import create_app
from serving.runner import serve_in_thread
from serving.segments import read_records
from tests.serving.helpers import small_config
from tests.serving.test_bad_inputs import CORPUS, body_bytes
from tests.serving.test_reliability import _poison_user

N_REQUESTS = 2000
CONCURRENCY = 32
POISON_EVERY = 100  # 1%


def _plan(seed: int = 0) -> list[tuple[str, str, bytes, bool]]:
    """(kind, route, body, valid) per request: acts, events on earlier acts, and the poisoned."""
    rng = random.Random(seed)
    bad = [c for c in CORPUS if c["status"] >= 400 and c["status"] != 413]
    plan = []
    for i in range(N_REQUESTS):
        if i % POISON_EVERY == POISON_EVERY - 1:
            if (i // POISON_EVERY) % 2:
                case = rng.choice(bad)
                plan.append(("invalid", case["route"], body_bytes(case), False))
            else:
                body = {"request_id": f"p{i}", "user_id": "poison"}
                plan.append(("poison", "/v1/act", json.dumps(body).encode(), False))
        elif i % 5 == 4 and i > 10:
            ev = {
                "request_id": f"a{rng.randrange(i - 5)}",
                "position": 1,
                "event": "click",
                "event_id": f"e{i}",
            }
            plan.append(("event", "/v1/events", json.dumps(ev).encode(), True))
        else:
            body = {"request_id": f"a{i}", "user_id": f"u{rng.randrange(1, 40):04d}", "k": 5}
            plan.append(("act", "/v1/act", json.dumps(body).encode(), True))
    return plan


async def _run(base: str, plan: list[tuple[str, str, bytes, bool]]) -> list[tuple[str, bool, int | str]]:
    sem = asyncio.Semaphore(CONCURRENCY)
    limits = httpx.Limits(max_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:

        async def one(kind: str, route: str, body: bytes, valid: bool) -> tuple[str, bool, int | str]:
            async with sem:
                try:
                    r = await client.post(route, content=body, headers={"content-type": "application/json"})
                    return kind, valid, r.status_code
                except httpx.HTTPError as e:
                    return kind, valid, f"{e.__class__.__name__}: {e}"

        return await asyncio.gather(*(one(*p) for p in plan))


@pytest.mark.integration
def test_no_valid_request_fails_under_poisoned_load(serve_registry, tmp_path, monkeypatch):
    reg, _ = serve_registry
    ev = tmp_path / "ev"
    _poison_user(monkeypatch)
    plan = _plan()
    app = create_app(reg, events=ev, cfg=small_config(exploration={"samples": 8}))
    with serve_in_thread(app) as base:
        out = asyncio.run(_run(base, plan))
    failed_valid = [(k, s) for k, valid, s in out if valid and s != 200]
    assert failed_valid == [], Counter(map(str, failed_valid)).most_common(5)
    poisoned = Counter((k, s) for k, valid, s in out if not valid)
    assert sum(poisoned.values()) == N_REQUESTS // POISON_EVERY
    assert poisoned[("poison", 503)] == 10
    assert all(isinstance(s, int) and 400 <= s < 500 for (k, s) in poisoned if k == "invalid")
    acked = {json.loads(b)["event_id"] for k, _, b, _ in plan if k == "event"}
    stored = Counter(r["event_id"] for r in read_records(ev / "events"))
    assert set(stored) == acked and set(stored.values()) == {1}  # each acknowledged event exactly once
