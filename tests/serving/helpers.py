"""Starting the app under TestClient and waiting for its first model (no network, no sleeps
beyond polling readiness)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from serving.app import create_app
from serving.config import ServeConfig


def client(registry: Path, events: Path, *, policy: str = "production", cfg: ServeConfig | None = None,
           **kw: Any) -> TestClient:  # fmt: skip
    return TestClient(create_app(registry, policy=policy, events=events, cfg=cfg or small_config(), **kw))


def small_config(**updates: Any) -> ServeConfig:
    data: dict[str, Any] = {"exploration": {"samples": 16}, "log": {"commit_interval_ms": 1.0}, "poll_s": 0}
    data.update(updates)
    return ServeConfig.model_validate(data)


def wait_ready(c: TestClient, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while c.get("/readyz").status_code != 200:
        assert time.monotonic() < end, "server never became ready"
        time.sleep(0.02)
