"""``POST /v1/act`` and ``POST /v1/act:batch``: personalised slates with plans and propensities."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, HTTPException

from serving.batching import ModelError
from serving.routes.errors import ERRORS
from serving.schemas import (
    ActBatchRequest,
    ActBatchResponse,
    ActError,
    ActRequest,
    ActResponse,
)
from serving.state import ServingState, state

router = APIRouter(tags=["act"])


async def answer(st: ServingState, req: ActRequest) -> ActResponse:
    """One request through the micro-batcher (or the fallback past its deadline), then its
    decision to the decision log as ``decisions.on_failure`` says."""
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
    response = ans.response
    if st.cfg.decisions.on_failure == "reject":
        try:
            await asyncio.shield(st.decisions.record(ans.decision))
        except OSError as e:
            raise HTTPException(
                503, f"decision log write failed, slate not served (decisions.on_failure: reject): {e}"
            ) from None
    elif st.decisions.log.healthy:
        st.decisions.record(ans.decision)  # group commit; not awaited (a failure is counted)
    else:  # not queued: a decision the log may never hold must not be used for evaluation
        st.metrics.log_write_failures.labels("decisions").inc()
        response = {**response, "logged": False, "evaluable": False}
    if response["fallback"]:
        st.metrics.fallbacks.labels(response["fallback_reason"]).inc()
    for it in response["slate"]:
        st.metrics.served_items.labels(str(m.decile.get(it["item_id"], -1))).inc()
    return ActResponse.model_validate(response)


@router.post("/v1/act", response_model=ActResponse, responses=ERRORS)
async def act(req: ActRequest, st: ServingState = Depends(state)) -> ActResponse:
    """A personalised slate with its plan, scores and propensities."""
    return await answer(st, req)


async def _one(st: ServingState, req: ActRequest | ActError) -> ActResponse | ActError:
    if isinstance(req, ActError):  # invalid: answered as validation left it
        return req
    try:
        return await answer(st, req)
    except HTTPException as e:
        return ActError(request_id=req.request_id, status=e.status_code, error=str(e.detail))


@router.post("/v1/act:batch", response_model=ActBatchResponse, responses=ERRORS)
async def act_batch(body: ActBatchRequest, st: ServingState = Depends(state)) -> ActBatchResponse:
    """Several requests; they share micro-batches with concurrent traffic. Each is answered in
    its slot: a slate, or an error with the status ``/v1/act`` would have given it (200 overall)."""
    out = list(await asyncio.gather(*(_one(st, r) for r in body.requests)))
    return ActBatchResponse(responses=out, failed=sum(isinstance(r, ActError) for r in out))
