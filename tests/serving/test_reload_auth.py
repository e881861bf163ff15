"""``POST /v1/models/reload`` takes the admin token only as ``Authorization: Bearer TOKEN``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from serving.config import ServeConfig
from serving.routes.models import router
from serving.state import state


@pytest.fixture
def client(tmp_path) -> TestClient:
    """The models router alone, over a state whose registry is empty: a request that gets past
    the token check is answered 404 (no such version), one that does not 401."""
    app = FastAPI()
    app.include_router(router)
    manager = SimpleNamespace(registry=str(tmp_path / "REG"), follows="production", pinned=None)
    fake = SimpleNamespace(cfg=ServeConfig(admin_token="s3cret"), manager=manager)
    app.dependency_overrides[state] = lambda: fake
    return TestClient(app)


@pytest.mark.parametrize(
    ("header", "detail"),
    [
        (None, "send the admin token as `Authorization: Bearer TOKEN`"),
        ("s3cret", "send the admin token as `Authorization: Bearer TOKEN`"),  # the bare token
        ("Basic s3cret", "send the admin token as `Authorization: Bearer TOKEN`"),
        ("Bearer", "send the admin token as `Authorization: Bearer TOKEN`"),
        ("Bearer ", "send the admin token as `Authorization: Bearer TOKEN`"),
        ("Bearers3cret", "send the admin token as `Authorization: Bearer TOKEN`"),
        ("Bearer wrong", "wrong admin token"),
        ("Bearer s3cret2", "wrong admin token"),
    ],
)
def test_anything_but_bearer_and_the_token_is_401(client, monkeypatch, header, detail):
    monkeypatch.delenv("PARPO_ADMIN_TOKEN", raising=False)
    headers = {} if header is None else {"Authorization": header}
    r = client.post("/v1/models/reload", headers=headers)
    assert r.status_code == 401 and r.json() == {"detail": detail}
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("header", ["Bearer s3cret", "bearer s3cret", "Bearer  s3cret "])
def test_the_bearer_token_gets_past_the_check(client, monkeypatch, header):
    monkeypatch.delenv("PARPO_ADMIN_TOKEN", raising=False)
    r = client.post("/v1/models/reload", headers={"Authorization": header})
    assert r.status_code == 404 and "no registry here" in r.json()["detail"]  # past auth, at the registry
