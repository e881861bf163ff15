"""``GET /v1/models`` (what is served) and ``POST /v1/models/reload`` (admin token)."""

from __future__ import annotations

import asyncio
import hmac
import logging

from fastapi import APIRouter, Depends, Header, HTTPException

from serving.schemas import ErrorBody, ModelInfo, ModelsResponse, ReloadRequest
from serving.state import ServingState, state

log = logging.getLogger("parpo.serve")
router = APIRouter(tags=["models"])


@router.get("/v1/models", response_model=ModelsResponse)
async def models(st: ServingState = Depends(state)) -> ModelsResponse:
    m = st.manager.current
    info = None
    if m is not None:
        info = ModelInfo(policy_version=m.policy_version, reward_version=m.bundle.reward_version,
                         loaded_at=m.loaded_at, follows=st.manager.follows)  # fmt: skip
    return ModelsResponse(serving=info, reloading=st.manager.reloading, last_error=st.manager.last_error)


@router.post("/v1/models/reload", status_code=202, responses={401: {"model": ErrorBody},
             403: {"model": ErrorBody}, 404: {"model": ErrorBody}})  # fmt: skip
async def reload(
    body: ReloadRequest | None = None,
    authorization: str | None = Header(None),
    st: ServingState = Depends(state),
) -> dict[str, str]:
    """Load and warm a version in the background, then swap (``Authorization: Bearer TOKEN``)."""
    token = st.cfg.token()
    if token is None:
        raise HTTPException(403, "reload is disabled: set PARPO_ADMIN_TOKEN or admin_token")
    challenge = {"WWW-Authenticate": "Bearer"}
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():  # the scheme is case-insensitive (RFC 7235)
        raise HTTPException(401, "send the admin token as `Authorization: Bearer TOKEN`", headers=challenge)
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise HTTPException(401, "wrong admin token", headers=challenge)
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
