"""Running the app: ``serve_forever`` (``parpo serve``: uvicorn in the foreground) and
``serve_in_thread`` (127.0.0.1 in a background thread, for demos, tests and notebooks).

uvicorn handles SIGTERM: it stops accepting connections, finishes the in-flight requests, and
the app then answers what is queued and fsyncs both logs before the process exits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from parpo_core.errors import UserError

#: Seconds an idle keep-alive connection stays open. Longer than clients' and load balancers'
#: idle timeouts (httpx 5 s, nginx upstream 60 s, AWS ALB 60 s): the side that closes an idle
#: connection must be the client, or a request sent on it as the server closes it fails with a
#: connection error it cannot safely retry (uvicorn's default is 5 s, the same as httpx's).
KEEP_ALIVE_S = 75


def serve_forever(app: Any, host: str, port: int, *, graceful_s: int = 30) -> None:
    """Serve ``app`` on ``host:port`` until SIGTERM/SIGINT (then drain for up to ``graceful_s``)."""
    import logging

    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=graceful_s,
                timeout_keep_alive=KEEP_ALIVE_S)  # fmt: skip


@contextmanager
def serve_in_thread(
    app: Any, *, timeout_s: float = 300.0, poll_s: float = 0.05, ready: bool = True
) -> Iterator[str]:
    """Start ``app`` under uvicorn on a port the OS picks, wait until ``/readyz`` answers 200
    (the policy is loaded, the logs take writes; ``ready=False``: only until it listens), yield
    its base URL, then stop it the graceful way (drain, flush the logs) when the block ends,
    also on an error."""
    import httpx
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    try:
        while not (server.started and server.servers):
            if time.monotonic() > deadline or not thread.is_alive():
                raise UserError("the local server did not start")
            time.sleep(poll_s)
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        while ready and httpx.get(f"{base}/readyz").status_code != 200:
            if time.monotonic() > deadline:
                raise UserError(f"the local server did not become ready within {timeout_s:.0f} s")
            time.sleep(2 * poll_s)
        yield base
    finally:
        server.should_exit = True
        thread.join()
