"""The committed bad-input corpus (``data/bad_inputs.json``): every case gets its status and
one readable ``error`` line naming the field, and none of them harms a valid request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.serving.helpers import client, wait_ready

CORPUS = json.loads((Path(__file__).parent / "data" / "bad_inputs.json").read_text())["cases"]


def body_bytes(case: dict[str, Any]) -> bytes:
    """The exact bytes a case sends."""
    if "raw" in case:
        return case["raw"].encode("utf-8", errors="surrogateescape")
    body = case.get("body")
    if "fill" in case:
        f = case["fill"]
        if f["item"] == "pad":
            filled: Any = {"pad": "x" * f["n"]}
        else:
            filled = [_fmt(f["item"], i) for i in range(f["n"])]
        body = {**body, f["key"]: filled}
    if "nest" in case:
        inner = json.dumps({"request_id": "r-1", "user_id": "u-1", "context": {"d": "@"}})
        return inner.replace('"@"', "[" * case["nest"] + "]" * case["nest"]).encode()
    return json.dumps(body).encode()


def _fmt(item: Any, i: int) -> Any:
    if isinstance(item, str):
        return item.format(i)
    return {k: _fmt(v, i) if isinstance(v, str) else v for k, v in item.items()}


@pytest.fixture(scope="module")
def app(serve_registry, tmp_path_factory):
    reg, _ = serve_registry
    with client(reg, tmp_path_factory.mktemp("bad") / "ev") as c:
        wait_ready(c)
        yield c


def test_the_corpus_is_large_and_covers_every_route():
    routes = {c["route"] for c in CORPUS}
    assert routes == {"/v1/act", "/v1/act:batch", "/v1/events"}
    assert len(CORPUS) >= 120 and len([c for c in CORPUS if c["status"] != 200]) >= 110


@pytest.mark.parametrize("case", CORPUS, ids=[c["name"] for c in CORPUS])
def test_bad_input_gets_its_status_and_one_line(app, case):
    r = app.post(case["route"], content=body_bytes(case), headers={"content-type": "application/json"})
    assert r.status_code == case["status"], r.text[:500]
    out = r.json()
    if case["status"] >= 400:
        assert isinstance(out["error"], str) and "\n" not in out["error"]
        assert "Traceback" not in r.text
        assert case.get("error_contains", "") in out["error"], out["error"]
    if "failed" in case:
        assert out["failed"] == case["failed"]
        errors = [x for x in out["responses"] if "error" in x]
        assert [e["status"] for e in errors] == [422] * case["failed"]
        assert all(e["request_id"] for e in errors)  # each names its request
        assert [x["request_id"] for x in out["responses"]] == [
            q["request_id"] for q in case["body"]["requests"]
        ]
    # The server is unharmed: a valid request right after is served.
    ok = app.post("/v1/act", json={"request_id": "after", "user_id": "u0001"})
    assert ok.status_code == 200, ok.text
