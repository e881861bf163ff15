"""``parpo serve``: the online inference endpoint (``serving/``) under uvicorn
(``serving.runner.serve_forever``; SIGTERM drains and flushes the logs).

One process with async request handling; scale out with replicas behind a load balancer,
each following the registry's ``production`` pointer (docs/serving.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from parpo.cli.console import REGISTRY_ENV

#: Where decisions and events go when ``--events`` is not given (relative to the working directory).
DEFAULT_EVENTS = Path("parpo-events")


def serve(
    registry: Annotated[
        Path, typer.Option("--registry", "-r", help="Registry folder (REG).", envvar=REGISTRY_ENV)
    ],
    policy: Annotated[
        str,
        typer.Option(help="Policy version to serve, or a pointer to follow by polling (production, latest)."),
    ] = "production",
    events: Annotated[
        Path, typer.Option(help="Folder of the decision and event logs (decisions/, events/).")
    ] = DEFAULT_EVENTS,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    config: Annotated[str, typer.Option("--config", "-c", help="serve preset or YAML file.")] = "default",
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            help="Dotted overrides, e.g. batching.max_batch=1 exploration.samples=32.", show_default=False
        ),
    ] = None,
) -> None:
    """Serve a trained policy over HTTP: /v1/act, /v1/events, /v1/models, /metrics."""
    from parpo.api.serve import checked_app
    from parpo.presets import load
    from serving.config import ServeConfig
    from serving.runner import serve_forever

    cfg = load(ServeConfig, "serve", config, overrides)
    app = checked_app(registry, policy, events, cfg, ("--registry", "--events"))
    typer.echo(f"serving {registry} policy {policy} on http://{host}:{port} (logs in {events})")
    serve_forever(app, host, port)
