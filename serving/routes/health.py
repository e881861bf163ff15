"""``GET /livez``, ``GET /readyz`` (a policy is loaded and both logs take writes) and ``GET
/metrics`` (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from serving.schemas import ErrorBody
from serving.state import ServingState, state

router = APIRouter(tags=["health"])


@router.get("/livez")
async def livez() -> dict[str, str]:
    return {"status": "alive"}


@router.get("/readyz", responses={503: {"model": ErrorBody}})
async def readyz(st: ServingState = Depends(state)) -> JSONResponse:
    if st.manager.current is None:
        reason = "loading"
        if st.first_load is not None and st.first_load.done() and not st.first_load.cancelled():
            err = st.first_load.exception()
            reason = f"load failed: {err}" if err else reason
        return JSONResponse(status_code=503, content={"error": reason, "detail": reason})
    problems = st.log_problems()
    if problems:  # answering without logging would lose decisions and feedback: take no traffic
        reason = "; ".join(problems)
        return JSONResponse(status_code=503, content={"error": reason, "detail": reason})
    return JSONResponse({"status": "ready", "policy_version": st.manager.current.policy_version})


@router.get("/metrics")
async def prometheus(st: ServingState = Depends(state)) -> Response:
    return Response(st.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
