"""Pure ASGI middleware: the body-size limit (413) and per-route request metrics.

FastAPI has no body limit, so it is enforced here before a handler reads the body: a
``Content-Length`` over the limit is refused at once, and a chunked body is counted as it
streams and refused as soon as it passes the limit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from serving.metrics import Metrics

Scope = dict[str, Any]


class Middleware:
    """``routes``: the app's route paths (metrics label any other path ``other``, so a scan of
    random URLs cannot grow the label set)."""

    def __init__(
        self, app: Any, *, max_body: int, metrics: Metrics, version: Callable[[], str], routes: frozenset[str]
    ) -> None:
        self.app, self.max_body, self.metrics, self.version, self.routes = (
            app,
            max_body,
            metrics,
            version,
            routes,
        )

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in self.routes else "other"
        start = time.perf_counter()
        status = 500
        self.metrics.in_flight.inc()
        try:
            length = dict(scope["headers"]).get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                status = 413
                await _too_large(send, self.max_body)
                return
            seen, over = 0, False

            async def limited() -> dict[str, Any]:
                nonlocal seen, over
                msg = await receive()
                if msg["type"] == "http.request":
                    seen += len(msg.get("body", b""))
                    if seen > self.max_body:
                        # Stop the body here; whatever the app answers to a cut body becomes 413.
                        over = True
                        return {"type": "http.request", "body": b"", "more_body": False}
                return msg

            async def sending(msg: dict[str, Any]) -> None:
                nonlocal status
                if over:
                    if msg["type"] == "http.response.start":
                        status = 413
                        await _too_large(send, self.max_body)
                    return
                if msg["type"] == "http.response.start":
                    status = msg["status"]
                await send(msg)

            await self.app(scope, limited, sending)
        finally:
            self.metrics.in_flight.dec()
            self.metrics.requests.labels(route, str(status), self.version()).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)


async def _too_large(send: Any, limit: int) -> None:
    line = f"request body larger than {limit} bytes (serve config max_body_bytes)"
    body = json.dumps({"error": line, "detail": line})
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})
