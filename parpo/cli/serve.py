"""``parpo serve``: the online inference endpoint (``serving/``) under uvicorn
(``serving.runner.serve_forever``; SIGTERM drains and flushes the logs).

One process with async request handling; scale out with replicas behind a load balancer,
each following the registry's ``production`` pointer (docs/serving.md).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Annotated

import typer

#: Where decisions and events go when ``--events`` is not given (relative to the working directory).
DEFAULT_EVENTS = Path("parpo-events")


def serve(
    registry: Annotated[Path, typer.Option("--registry", "-r", help="Registry folder (REG).")],
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
    from parpo.presets import load
    from parpo_core.artefacts import Registry
    from serving.app import create_app
    from serving.config import ServeConfig
    from serving.runner import serve_forever

    cfg = load(ServeConfig, "serve", config, overrides)
    folder_or_error(registry, "--registry")  # one error line now, not a traceback once serving
    folder_or_error(events, "--events")
    Registry(registry).resolve("policy", policy)  # a wrong registry or version is one error line, now
    app = create_app(registry, policy=policy, events=events, cfg=cfg)
    typer.echo(f"serving {registry} policy {policy} on http://{host}:{port} (logs in {events})")
    serve_forever(app, host, port)


def folder_or_error(path: Path, flag: str) -> None:
    """A UserError (one line) when ``path`` cannot be a folder: it is a file, it is below a file,
    or it cannot be looked at. A folder not created yet is fine."""
    from parpo_core.errors import UserError

    for p in (path, *path.parents):
        try:
            st = p.stat()
        except (FileNotFoundError, NotADirectoryError):
            continue  # not there yet (or below a file, found further up)
        except OSError as e:
            raise UserError(f"{flag} {path}: cannot look at {p} ({e.strerror})") from None
        if stat.S_ISDIR(st.st_mode):
            return
        where = "is a file" if p == path else f"is inside {p}, which is a file"
        raise UserError(f"{flag} {path} {where}; give a folder")
