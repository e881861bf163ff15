"""What the routes share (``ServingState``), built in the app's lifespan and kept on
``app.state.serve``; handlers reach it through the ``state`` dependency."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from fastapi import Request

from serving.acting import Answer, LoadedModel
from serving.batching import MicroBatcher
from serving.config import ServeConfig
from serving.decisions import DecisionLog
from serving.events import EventLog
from serving.metrics import Metrics
from serving.model_manager import ModelManager
from serving.schemas import ActRequest


class ServingState:
    """The logs, the model manager and the micro-batcher of one running app."""

    def __init__(self, registry: str, policy: str, events: Path, cfg: ServeConfig, metrics: Metrics,
                 warm_hook: Callable[[LoadedModel], None] | None) -> None:  # fmt: skip
        self.cfg, self.metrics = cfg, metrics
        failures = metrics.log_write_failures
        self.decisions = DecisionLog(events, cfg.log, lambda n, _: failures.labels("decisions").inc(n))
        self.events = EventLog(events, cfg.log, self.decisions, lambda n, _: failures.labels("events").inc(n))
        self.manager = ModelManager(registry, policy, cfg, metrics, warm_hook=warm_hook)
        self.batcher: MicroBatcher[ActRequest, Answer] = MicroBatcher(
            self._act, max_batch=cfg.batching.max_batch, max_wait_ms=cfg.batching.max_wait_ms, metrics=metrics
        )
        self.first_load: asyncio.Task[str] | None = None

    def _act(self, jobs: list[ActRequest]) -> list[Answer]:
        m = self.manager.current  # read once: the whole batch answers on one version
        assert m is not None
        ex = self.cfg.exploration
        return m.act(jobs, ex.samples, ex.temperature)

    def log_problems(self) -> list[str]:
        """Why a log cannot be written now (empty: both take writes)."""
        return [f"{name} log cannot be written ({log.last_error})"
                for name, log in (("decision", self.decisions.log), ("event", self.events.log))
                if not log.healthy]  # fmt: skip

    def policy_version(self) -> str:
        """The version answering now ("none" before the first load)."""
        m = self.manager.current
        return m.policy_version if m is not None else "none"


def state(request: Request) -> ServingState:
    """FastAPI dependency: the running app's shared state."""
    return request.app.state.serve
