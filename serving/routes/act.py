"""``POST /v1/act`` and ``POST /v1/act:batch``: personalised slates with plans and propensities."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, HTTPException

from serving.batching import ModelError
from serving.routes.errors import ERRORS
from serving.schemas import ActBatchRequest, ActBatchResponse, ActRequest, ActResponse
from serving.state import ServingState, state

router = APIRouter(tags=["act"])


async def answer(st: ServingState, req: ActRequest) -> ActResponse:
    """One request through the micro-batcher (or the fallback past its deadline); the decision
    is queued for the decision log's next group commit."""
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


@router.post("/v1/act", response_model=ActResponse, responses=ERRORS)
async def act(req: ActRequest, st: ServingState = Depends(state)) -> ActResponse:
    """A personalised slate with its plan, scores and propensities."""
    return await answer(st, req)


@router.post("/v1/act:batch", response_model=ActBatchResponse, responses=ERRORS)
async def act_batch(body: ActBatchRequest, st: ServingState = Depends(state)) -> ActBatchResponse:
    """Several requests; they share micro-batches with concurrent traffic."""
    return ActBatchResponse(responses=list(await asyncio.gather(*(answer(st, r) for r in body.requests))))
