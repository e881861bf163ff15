"""The FastAPI app: ``create_app(registry, ...)``; ``parpo serve`` runs it under uvicorn.

Routes (one router per feature, ``serving.routes``): ``POST /v1/act``, ``POST /v1/act:batch``,
``POST /v1/events``, ``GET /v1/models``, ``POST /v1/models/reload`` (admin token), ``GET
/livez``, ``GET /readyz``, ``GET /metrics``. docs/serving.md describes the API, the logs and
how to scale out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from serving.acting import LoadedModel
from serving.config import ServeConfig
from serving.metrics import Metrics
from serving.middleware import Middleware
from serving.routes import ROUTERS
from serving.schemas import error_line
from serving.state import ServingState

log = logging.getLogger("parpo.serve")


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

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import torch

        if cfg.runtime.threads:
            torch.set_num_threads(cfg.runtime.threads)
        st = ServingState(str(registry), policy, Path(events), cfg, metrics, warm_hook)
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
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http_error)
    for router in ROUTERS:
        app.include_router(router)

    def version() -> str:
        st = getattr(app.state, "serve", None)
        return st.policy_version() if st is not None else "none"

    routes = frozenset(r.path for router in ROUTERS for r in router.routes if isinstance(r, APIRoute))
    app.add_middleware(
        Middleware, max_body=cfg.max_body_bytes, metrics=metrics, version=version, routes=routes
    )
    return app


async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
    """422 with one readable line (the first problem, where) and the first 20 details."""
    errs = exc.errors()
    details = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errs[:20]]
    return JSONResponse(status_code=422, content={"error": error_line(errs), "detail": details})


#: What FastAPI's "There was an error parsing the body" (400) was caused by, in words.
_PARSE_ERRORS = {UnicodeDecodeError: "body is not UTF-8", RecursionError: "body nests too deeply to parse"}


async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
    """Every error answer has ``error``, one readable line (and ``detail``, FastAPI's field)."""
    line = next((m for t, m in _PARSE_ERRORS.items() if isinstance(exc.__cause__, t)), str(exc.detail))
    return JSONResponse(
        status_code=exc.status_code, content={"error": line, "detail": exc.detail}, headers=exc.headers
    )
