"""The FastAPI app: ``create_app(registry, ...)``; ``parpo serve`` runs it under uvicorn.

Routes: ``POST /v1/act``, ``POST /v1/act:batch``, ``POST /v1/events``, ``GET /v1/models``,
``POST /v1/models/reload`` (admin token), ``GET /livez``, ``GET /readyz``, ``GET /metrics``.
docs/serving.md describes the API, the logs and how to scale out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from serving.acting import Answer, LoadedModel
from serving.batching import MicroBatcher, ModelError
from serving.config import ServeConfig
from serving.decisions import DecisionLog
from serving.events import EventLog
from serving.metrics import Metrics
from serving.middleware import Middleware
from serving.model_manager import ModelManager
from serving.schemas import (
    ActBatchRequest,
    ActBatchResponse,
    ActRequest,
    ActResponse,
    ErrorBody,
    Event,
    EventBatch,
    EventsResponse,
    ModelInfo,
    ModelsResponse,
    ReloadRequest,
)

log = logging.getLogger("parpo.serve")
ERRORS: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorBody, "description": "body too large"},
    503: {"model": ErrorBody, "description": "no model loaded yet, or the model call failed"},
}


class State:
    """Everything the routes share; built in the lifespan (one per running app)."""

    def __init__(self, registry: str, policy: str, events: Path, cfg: ServeConfig, metrics: Metrics,
                 warm_hook: Callable[[LoadedModel], None] | None) -> None:  # fmt: skip
        self.cfg, self.metrics = cfg, metrics
        self.decisions = DecisionLog(events, cfg.log)
        self.events = EventLog(events, cfg.log, self.decisions)
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


def create_app(
    registry: str | Path,
    *,
    policy: str = "production",
    events: str | Path,
    cfg: ServeConfig | None = None,
    warm_hook: Callable[[LoadedModel], None] | None = None,
) -> FastAPI:
    """The app serving ``policy`` (a version, or a pointer it then follows) of ``registry``."""
    cfg = cfg or ServeConfig()
    metrics = Metrics()
    holder: dict[str, State] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import torch

        if cfg.runtime.threads:
            torch.set_num_threads(cfg.runtime.threads)
        st = State(str(registry), policy, Path(events), cfg, metrics, warm_hook)
        holder["s"] = st
        app.state.serve = st
        st.batcher.start()
        st.first_load = asyncio.create_task(st.manager.load())
        st.first_load.add_done_callback(lambda t: t.cancelled() or t.exception() is None or log.error(
            "loading the first model failed: %s", t.exception()))  # fmt: skip
        st.manager.start_polling()
        try:
            yield
        finally:
            # Graceful shutdown (SIGTERM): the server has stopped taking requests and finished the
            # in-flight ones; answer what is queued, then flush and fsync both logs.
            await st.manager.stop()
            await st.batcher.stop()
            if not st.first_load.done():
                st.first_load.cancel()
            await asyncio.to_thread(st.decisions.close)
            await asyncio.to_thread(st.events.close)

    app = FastAPI(title="PARPO serving", version="1", lifespan=lifespan)

    def state() -> State:
        return holder["s"]

    def current_version() -> str:
        st = holder.get("s")
        return st.manager.current.policy_version if st and st.manager.current else "none"

    app.add_middleware(Middleware, max_body=cfg.max_body_bytes, metrics=metrics, version=current_version)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        first = errs[0] if errs else {"loc": (), "msg": "invalid body"}
        where = ".".join(str(p) for p in first["loc"])
        details = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errs[:20]]
        return JSONResponse(status_code=422, content={"error": f"{where}: {first['msg']}", "detail": details})

    async def answer(req: ActRequest) -> ActResponse:
        st = state()
        m = st.manager.current
        if m is None:
            raise HTTPException(503, "no model loaded yet (see /readyz)")
        try:
            if req.deadline_ms is None:
                ans = await st.batcher.submit(req)
            else:
                try:
                    ans = await asyncio.wait_for(st.batcher.submit(req), req.deadline_ms / 1000)
                except TimeoutError:
                    ans = await asyncio.to_thread(m.fallback, req, "deadline")
        except ModelError as e:
            st.metrics.model_failures.inc()
            raise HTTPException(503, f"model call failed: {e}") from None
        if ans.response["fallback"]:
            st.metrics.fallbacks.labels(ans.response["fallback_reason"]).inc()
        for it in ans.response["slate"]:
            st.metrics.served_items.labels(str(m.decile.get(it["item_id"], -1))).inc()
        st.decisions.record(ans.decision)  # group commit; not awaited (the response acknowledges nothing)
        return ActResponse.model_validate(ans.response)

    @app.post("/v1/act", response_model=ActResponse, responses=ERRORS)
    async def act(req: ActRequest) -> ActResponse:
        """A personalised slate with its plan, scores and propensities."""
        return await answer(req)

    @app.post("/v1/act:batch", response_model=ActBatchResponse, responses=ERRORS)
    async def act_batch(body: ActBatchRequest) -> ActBatchResponse:
        """Several requests; they share micro-batches with concurrent traffic."""
        return ActBatchResponse(responses=list(await asyncio.gather(*(answer(r) for r in body.requests))))

    @app.post("/v1/events", response_model=EventsResponse, responses=ERRORS)
    async def post_events(body: EventBatch | Event) -> EventsResponse:
        """One event or ``{"events": [...]}``; answered after the records are fsynced."""
        st = state()
        batch = body.events if isinstance(body, EventBatch) else [body]
        try:
            results = await st.events.submit(batch)
        except OSError as e:
            raise HTTPException(503, f"event log write failed: {e}") from None
        for e, r in zip(batch, results, strict=True):
            if r.stored:
                flag = "duplicate" if r.duplicate else "unknown_request" if r.unknown_request else (
                    "item_mismatch" if r.item_mismatch else "none")  # fmt: skip
                st.metrics.events.labels(e.event, flag).inc()
        return EventsResponse(accepted=len(results), results=results)

    @app.get("/livez")
    async def livez() -> dict[str, str]:
        return {"status": "alive"}

    @app.get("/readyz", responses={503: {"model": ErrorBody}})
    async def readyz() -> JSONResponse:
        st = state()
        if st.manager.current is None:
            reason = "loading"
            if st.first_load is not None and st.first_load.done() and not st.first_load.cancelled():
                err = st.first_load.exception()
                reason = f"load failed: {err}" if err else reason
            return JSONResponse(status_code=503, content={"detail": reason})
        return JSONResponse({"status": "ready", "policy_version": st.manager.current.policy_version})

    @app.get("/v1/models", response_model=ModelsResponse)
    async def models() -> ModelsResponse:
        st = state()
        m = st.manager.current
        info = None
        if m is not None:
            info = ModelInfo(policy_version=m.policy_version, reward_version=m.bundle.reward_version,
                             loaded_at=m.loaded_at, follows=st.manager.follows)  # fmt: skip
        return ModelsResponse(serving=info, reloading=st.manager.reloading)

    @app.post("/v1/models/reload", status_code=202, responses={401: {"model": ErrorBody},
              403: {"model": ErrorBody}, 404: {"model": ErrorBody}})  # fmt: skip
    async def reload(
        body: ReloadRequest | None = None, authorization: str | None = Header(None)
    ) -> dict[str, str]:
        """Load and warm a version in the background, then swap (``Authorization: Bearer TOKEN``)."""
        st = state()
        token = st.cfg.token()
        if token is None:
            raise HTTPException(403, "reload is disabled: set PARPO_ADMIN_TOKEN or admin_token")
        given = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(401, "wrong or missing admin token")
        from parpo_core.artefacts import Registry
        from parpo_core.artefacts.errors import RegistryError

        want = (body.version if body else None) or st.manager.follows or st.manager.pinned
        try:
            name = (await asyncio.to_thread(Registry(st.manager.registry).resolve, "policy", want)).name
        except RegistryError as e:
            raise HTTPException(404, str(e)) from None
        task = asyncio.create_task(st.manager.load(name))
        task.add_done_callback(lambda t: t.cancelled() or t.exception() is None or log.error(
            "reload of %s failed: %s", name, t.exception()))  # fmt: skip
        return {"reloading": name}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app
