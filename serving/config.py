"""The ``serve`` config group (``configs/serve/*.yaml``): batching, exploration, limits, logs.

``admin_token`` may be left out of the file: ``PARPO_ADMIN_TOKEN`` in the environment wins
over it, so the token never has to sit in a config that is committed.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field

from parpo_core.config import RuntimeConfig, StrictModel
from serving.schemas import MIN_TEMPERATURE

ADMIN_TOKEN_ENV = "PARPO_ADMIN_TOKEN"


class BatchingConfig(StrictModel):
    """Micro-batching of model calls; ``max_batch: 1`` turns it off."""

    max_batch: int = Field(32, ge=1, description="requests per model call at most")
    max_wait_ms: float = Field(
        2.0, ge=0, description="wait at most this long for more requests, only when requests are queueing"
    )


class ExplorationConfig(StrictModel):
    temperature: float = Field(
        1.0, ge=MIN_TEMPERATURE, description="sampling temperature when a request sets no 'explore'"
    )
    samples: int = Field(
        64, ge=1, le=4096, description="N: policy samples per request for the Monte-Carlo propensity"
    )


class LogConfig(StrictModel):
    commit_interval_ms: float = Field(
        2.0, ge=0, description="group commit: collect records this long before one write + fsync"
    )
    segment_bytes: int = Field(64 << 20, ge=1024, description="start a new segment past this size")
    index_limit: int = Field(
        1_000_000, ge=1, description="decisions (and event ids) kept in memory to flag events"
    )
    probe_s: float = Field(
        1.0,
        gt=0,
        description="while a log cannot be written, try a scratch write this often to notice recovery",
    )


class DecisionsConfig(StrictModel):
    on_failure: Literal["serve", "reject"] = Field(
        "serve",
        description="when the decision log cannot be written: 'serve' answers anyway with logged: false and "
        "evaluable: false (counted in parpo_log_write_failures_total); 'reject' waits for each decision's "
        "fsync and answers 503 when it fails",
    )


class ServeConfig(StrictModel):
    batching: BatchingConfig = BatchingConfig()
    exploration: ExplorationConfig = ExplorationConfig()
    log: LogConfig = LogConfig()
    decisions: DecisionsConfig = DecisionsConfig()
    max_body_bytes: int = Field(1 << 20, ge=1024, description="larger request bodies get 413")
    poll_s: float = Field(
        5.0, ge=0, description="seconds between checks of the registry pointer followed (0: never)"
    )
    admin_token: str | None = Field(
        None, description=f"token for POST /v1/models/reload (env {ADMIN_TOKEN_ENV} wins; unset: disabled)"
    )
    runtime: RuntimeConfig = RuntimeConfig(device="cpu", threads=1)

    def token(self) -> str | None:
        return os.environ.get(ADMIN_TOKEN_ENV) or self.admin_token
