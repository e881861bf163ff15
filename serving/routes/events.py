"""``POST /v1/events``: feedback on served slates, answered after the records are fsynced."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException

from serving.routes.errors import ERRORS
from serving.schemas import EventBatch, EventsBody, EventsResponse
from serving.state import ServingState, state

router = APIRouter(tags=["events"])


@router.post("/v1/events", response_model=EventsResponse, responses=ERRORS)
async def post_events(body: EventsBody, st: ServingState = Depends(state)) -> EventsResponse:
    """One event or ``{"events": [...]}``; answered 200 after every record is fsynced, 503 (and
    none stored) when the write failed: retrying with the same ``event_id`` is always safe."""
    batch = body.events if isinstance(body, EventBatch) else [body]
    try:
        results = await st.events.submit(batch)
    except OSError as e:
        raise HTTPException(503, f"event log write failed, nothing of this request stored: {e}") from None
    for e, r in zip(batch, results, strict=True):
        if r.stored:
            flag = "duplicate" if r.duplicate else "unknown_request" if r.unknown_request else (
                "item_mismatch" if r.item_mismatch else "none")  # fmt: skip
            st.metrics.events.labels(e.event, flag).inc()
    return EventsResponse(accepted=len(results), results=results)
