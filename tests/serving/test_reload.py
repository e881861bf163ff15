"""Model versions: hot reload under load (slow warm-up, no failed request), pointer polling."""

from __future__ import annotations

import threading
import time

from parpo_core.artefacts import Registry
from tests.serving.helpers import client, small_config, wait_ready


def test_reload_under_load_swaps_with_no_failed_request(serve_registry, tmp_path, monkeypatch):
    reg, (v1, v2) = serve_registry
    monkeypatch.setenv("PARPO_ADMIN_TOKEN", "s3cret")
    loads: list[str] = []

    def slow_warm(model) -> None:  # the injected warm-up: at least 2 s for the new version
        loads.append(model.policy_version)
        if len(loads) > 1:
            time.sleep(2.0)

    with client(reg, tmp_path / "ev", policy=v1, warm_hook=slow_warm) as c:
        wait_ready(c)
        statuses: list[tuple[int, str | None]] = []
        stop = threading.Event()

        def traffic() -> None:
            i = 0
            while not stop.is_set():
                r = c.post(
                    "/v1/act", json={"request_id": f"t{threading.get_ident()}-{i}", "user_id": "u0003"}
                )
                statuses.append((r.status_code, r.json().get("policy_version")))
                i += 1

        threads = [threading.Thread(target=traffic) for _ in range(3)]
        for t in threads:
            t.start()
        assert c.post("/v1/models/reload", json={"version": v2}).status_code == 401  # no token
        r = c.post("/v1/models/reload", json={"version": v2}, headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 202 and r.json() == {"reloading": v2}
        bad = c.post(
            "/v1/models/reload", json={"version": "v999"}, headers={"Authorization": "Bearer s3cret"}
        )
        assert bad.status_code == 404
        assert c.get("/readyz").status_code == 200  # ready during the reload too
        end = time.monotonic() + 60
        while c.get("/v1/models").json()["serving"]["policy_version"] != v2:
            assert time.monotonic() < end
            time.sleep(0.05)
        n_at_swap = len(statuses)
        while len(statuses) < n_at_swap + 6:
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join()
    assert loads == [v1, v2]
    assert {s for s, _ in statuses} == {200}, "a request failed during the reload"
    versions = [v for _, v in statuses]
    assert v1 in versions and versions[-3:] == [v2] * 3


def test_following_production_picks_up_a_promotion(serve_registry, tmp_path):
    reg, (v1, v2) = serve_registry
    registry = Registry(reg)
    with client(reg, tmp_path / "ev", cfg=small_config(poll_s=0.05)) as c:
        wait_ready(c)
        assert c.get("/v1/models").json()["serving"] == {
            **c.get("/v1/models").json()["serving"],
            "policy_version": v1,
            "follows": "production",
        }
        registry.promote("policy", v2)
        try:
            end = time.monotonic() + 60
            while c.get("/v1/models").json()["serving"]["policy_version"] != v2:
                assert time.monotonic() < end
                time.sleep(0.05)
            out = c.post("/v1/act", json={"request_id": "after", "user_id": "u0001"}).json()
            assert out["policy_version"] == v2
        finally:
            registry.promote("policy", v1)  # the session registry is shared with other tests


def test_reload_is_disabled_without_a_token(serve_registry, tmp_path, monkeypatch):
    reg, _ = serve_registry
    monkeypatch.delenv("PARPO_ADMIN_TOKEN", raising=False)
    with client(reg, tmp_path / "ev") as c:
        wait_ready(c)
        assert c.post("/v1/models/reload", headers={"Authorization": "Bearer x"}).status_code == 403
