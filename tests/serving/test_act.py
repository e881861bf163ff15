"""POST /v1/act and /v1/act:batch: the response contract, validation, limits, fallbacks."""

from __future__ import annotations

import threading

import pytest

from parpo_core.artefacts import Registry
from serving.acting import LoadedModel
from serving.segments import read_records
from tests.serving.helpers import client, small_config, wait_ready


@pytest.fixture
def served(serve_registry, tmp_path):
    reg, _ = serve_registry
    with client(reg, tmp_path / "ev") as c:
        wait_ready(c)
        yield c, reg, tmp_path / "ev"


def test_act_answers_with_versions_plan_and_propensities(serve_registry, tmp_path):
    reg, _ = serve_registry
    ev = tmp_path / "ev"
    body = {"request_id": "r1", "user_id": "u0001", "k": 4, "context": {"page": "home"}}
    with client(reg, ev) as c:
        wait_ready(c)
        r = c.post("/v1/act", json=body)
    # Leaving the client ran the graceful shutdown, which flushed the decision log.
    assert r.status_code == 200, r.text
    out = r.json()
    prod = Registry(reg).resolve("policy").name
    lineage = Registry(reg).open("policy", prod).lineage
    assert out["policy_version"] == prod and out["reward_version"] == lineage.reward
    assert out["request_id"] == "r1" and out["evaluable"] is True and out["explore"] == 1.0
    assert out["n_samples"] == 16 and out["fallback"] is None and out["cold_user"] is False
    slate = out["slate"]
    assert 1 <= len(slate) <= 4
    assert [s["position"] for s in slate] == list(range(1, len(slate) + 1))
    # The plan ends with the recommend that produced the slate; each step is a typed action.
    assert out["plan"][-1] == {"tool": "recommend", "items": [s["item_id"] for s in slate]}
    assert all(p["tool"] in ("search", "filter") for p in out["plan"][:-1])
    for s in slate:
        # The served draw is one of the N samples: at least 1/N, at most 1, a multiple of 1/N.
        assert 1 / 16 <= s["propensity"] <= 1.0 and (s["propensity"] * 16) == round(s["propensity"] * 16)
        assert s["score"] == pytest.approx(s["interest"] + s["conformity"], abs=1e-6)
    # The first slot's exact part over the plans drawn, and the bound the others leave.
    s1 = out["slot1_propensity"]
    assert 0 < s1["low"] <= s1["high"] <= 1 + 1e-9
    (dec,) = [d for d in read_records(ev / "decisions") if d["request_id"] == "r1"]
    assert dec["policy_version"] == prod and dec["n_samples"] == 16 and dec["context"] == {"page": "home"}
    assert (dec["slot1_low"], dec["slot1_high"]) == (s1["low"], s1["high"])
    assert [(s["item_id"], s["propensity"]) for s in dec["slate"]] == [
        (s["item_id"], s["propensity"]) for s in slate
    ]


def test_greedy_is_not_evaluable_and_unknowns_are_flagged(served):
    c, _, _ = served
    out = c.post(
        "/v1/act:batch",
        json={
            "requests": [
                {"request_id": "g", "user_id": "u0002", "explore": 0},
                {
                    "request_id": "n",
                    "user_id": "never-seen",
                    "candidates": ["i0001", "i0002", "nope"],
                    "k": 2,
                },
            ]
        },  # fmt: skip
    ).json()["responses"]
    g, n = out
    assert g["evaluable"] is False and g["explore"] == 0 and g["n_samples"] == 1
    assert all(s["propensity"] == 1.0 for s in g["slate"]) and g["slot1_propensity"] is None
    assert n["cold_user"] is True and n["unknown_candidates"] == ["nope"]
    assert {s["item_id"] for s in n["slate"]} <= {"i0001", "i0002"}
    assert all(s["cold"] for s in n["slate"])  # a cold user makes every pair cold


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"request_id": "x", "user_id": "u", "kk": 1}, "body.kk"),
        ({"request_id": "x", "user_id": "u", "k": 0}, "body.k"),
        ({"request_id": "x", "user_id": "u", "k": "ten"}, "body.k"),
        ({"request_id": "x"}, "body.user_id"),
        (
            {"request_id": "x", "user_id": "u", "request": {"constraints": {"price_min": -1}}},
            "body.request.constraints.price_min",
        ),  # fmt: skip
        ({"request_id": "x", "user_id": "u", "request": {"colour": "red"}}, "body.request.colour"),
        ({"request_id": "x", "user_id": "u", "explore": -0.5}, "body.explore"),
        ({"request_id": "x", "user_id": "u", "explore": 1e-40}, "body.explore"),  # would overflow float32
        ([1, 2], "body"),
    ],
)
def test_bad_bodies_are_422_naming_the_field(served, body, field):
    c, _, _ = served
    r = c.post("/v1/act", json=body)
    assert r.status_code == 422
    assert r.json()["error"].startswith(field + ":") or r.json()["error"].startswith(field)


def test_malformed_json_is_422_and_big_bodies_413(served):
    c, _, _ = served
    r = c.post("/v1/act", content=b'{"request_id": ', headers={"content-type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.json()["error"]
    limit = small_config().max_body_bytes
    big = b'{"request_id": "' + b"x" * limit + b'", "user_id": "u"}'
    assert c.post("/v1/act", content=big, headers={"content-type": "application/json"}).status_code == 413

    def chunks():  # no Content-Length: counted while it streams
        yield b'{"request_id": "'
        for _ in range(limit // 4096 + 2):
            yield b"x" * 4096
        yield b'", "user_id": "u"}'

    r = c.post("/v1/act", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert c.post("/v1/act", json={"request_id": "ok", "user_id": "u0001"}).status_code == 200


def test_deadline_gives_a_marked_popularity_fallback(serve_registry, tmp_path, monkeypatch):
    reg, _ = serve_registry
    release = threading.Event()
    real = LoadedModel.act

    def stuck(self, requests, n, tau):
        if any(r.request_id == "slow" for r in requests):
            release.wait(30)  # the model is busy past the request's deadline
        return real(self, requests, n, tau)

    monkeypatch.setattr(LoadedModel, "act", stuck)
    with client(reg, tmp_path / "ev") as c:
        wait_ready(c)
        out = c.post("/v1/act", json={"request_id": "slow", "user_id": "u0001", "k": 3, "deadline_ms": 50,
                                      "request": {"constraints": {"price_max": 1e9}}}).json()  # fmt: skip
        release.set()
        assert out["fallback"] == "popularity" and out["fallback_reason"] == "deadline"
        assert out["evaluable"] is False and all(s["propensity"] == 1.0 for s in out["slate"])
        model = c.app.state.serve.manager.current
        pop = model.bundle.catalogue.popularity
        rows = model.bundle.catalogue.rows([s["item_id"] for s in out["slate"]])
        assert list(pop[rows]) == sorted(pop, reverse=True)[:3]  # the three most popular items
        assert 'parpo_fallbacks_total{reason="deadline"} 1.0' in c.get("/metrics").text


def test_model_failure_is_503_with_reason_and_counted(serve_registry, tmp_path, monkeypatch):
    reg, _ = serve_registry

    def broken(self, requests, n, tau):
        raise RuntimeError("weights on fire")

    monkeypatch.setattr(LoadedModel, "act", broken)
    monkeypatch.setattr(LoadedModel, "warm", lambda self, n, tau: None)
    with client(reg, tmp_path / "ev") as c:
        wait_ready(c)
        r = c.post("/v1/act", json={"request_id": "f", "user_id": "u0001"})
        assert r.status_code == 503 and "weights on fire" in r.json()["detail"]
        assert "parpo_model_failures_total 1.0" in c.get("/metrics").text


def test_not_ready_until_loaded_then_metrics_name_the_version(serve_registry, tmp_path):
    reg, names = serve_registry
    gate = threading.Event()
    with client(reg, tmp_path / "ev", warm_hook=lambda m: gate.wait(30)) as c:
        assert c.get("/livez").status_code == 200
        assert c.get("/readyz").status_code == 503
        assert c.post("/v1/act", json={"request_id": "early", "user_id": "u1"}).status_code == 503
        gate.set()
        wait_ready(c)
        assert c.post("/v1/act", json={"request_id": "a", "user_id": "u0001"}).status_code == 200
        text = c.get("/metrics").text
        assert f'parpo_requests_total{{route="/v1/act",status="200",version="{names[0]}"}} 1.0' in text
        assert 'parpo_requests_total{route="/v1/act",status="503",version="none"} 1.0' in text
        assert "parpo_batch_size_count" in text and "parpo_served_items_total" in text
