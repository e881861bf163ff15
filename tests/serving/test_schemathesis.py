"""schemathesis against the app's own OpenAPI spec: 50 schema-valid and 50 schema-violating
generated requests per operation, and not one 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from tests.serving.helpers import client, small_config, wait_ready

pytestmark = pytest.mark.integration

KEEP = ("method", "url", "headers", "params", "json", "content", "cookies")


def fuzz(c: TestClient, op, mode: GenerationMode) -> set[int]:
    """Statuses of 50 generated requests of ``op``; fails on the first 5xx."""
    seen: set[int] = set()

    @settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)  # fmt: skip
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case) -> None:
        kw = case.as_transport_kwargs(base_url="http://testserver")
        r = c.request(**{k: v for k, v in kw.items() if k in KEEP})
        assert r.status_code < 500, (case.method, case.path, case.body, r.text[:300])
        seen.add(r.status_code)

    run()
    return seen


def test_no_operation_answers_5xx(serve_registry, tmp_path, monkeypatch):
    reg, _ = serve_registry
    monkeypatch.setenv("PARPO_ADMIN_TOKEN", "t")  # reload then answers 401/404/422, all checked
    cfg = small_config(exploration={"samples": 2})  # input handling is under test, not the model
    with client(reg, tmp_path / "ev", cfg=cfg) as c:
        wait_ready(c)
        schema = schemathesis.openapi.from_dict(c.get("/openapi.json").json())
        ops = [r.ok() for r in schema.get_all_operations()]
        assert {f"{op.method.upper()} {op.path}" for op in ops} >= {"POST /v1/act", "POST /v1/events"}
        statuses = {
            f"{op.path} {mode.value}": fuzz(c, op, mode)
            for op in ops
            for mode in GenerationMode
            if not (mode is GenerationMode.NEGATIVE and op.method.upper() == "GET")  # nothing to violate
        }
    # Generated bodies reach the handlers (200) and the validation (422) alike.
    assert 200 in statuses["/v1/act positive"] and 422 in statuses["/v1/act negative"]
    assert 200 in statuses["/v1/events positive"] and 422 in statuses["/v1/events negative"]
