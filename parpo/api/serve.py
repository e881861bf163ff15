"""Serving from Python: ``load_policy(registry, version).act(requests)`` answers ``/v1/act``
bodies in-process with the server's own model code, and ``create_app`` builds the FastAPI app
``parpo serve`` runs (to mount in another app, or run under any ASGI server)."""

from __future__ import annotations

import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parpo.api._common import Config, config_of

if TYPE_CHECKING:
    from fastapi import FastAPI

    from serving.acting import LoadedModel
    from serving.config import ServeConfig


class Policy:
    """A loaded policy version; ``act`` answers like ``POST /v1/act``."""

    def __init__(self, model: LoadedModel, cfg: ServeConfig) -> None:
        self._model, self._cfg = model, cfg

    @property
    def version(self) -> str:
        """The policy version's full name."""
        return self._model.policy_version

    @property
    def reward_version(self) -> str:
        """The reward version the policy was trained against (it scores the slates)."""
        return self._model.bundle.reward_version

    def act(self, requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """One ``/v1/act`` response (as JSON-ready dicts) per ``/v1/act`` body, in order; the
        bodies are validated as the server validates them (a bad one: a ``UserError`` naming it
        and the field). The slates come from the code the server runs (``serving.acting``), with
        the serve config's exploration defaults; no decision is logged here, so every answer
        says ``logged: false, evaluable: false``, as the server's do when its decision log is
        not written (serve with ``create_app`` to log decisions for off-policy evaluation)."""
        from pydantic import ValidationError

        from parpo_core.errors import UserError
        from serving.schemas import ActRequest, ActResponse, error_line

        parsed = []
        for i, body in enumerate(requests):
            try:
                parsed.append(ActRequest.model_validate(body))
            except ValidationError as e:
                raise UserError(f"requests[{i}]: {error_line(e.errors())}") from None
        ex = self._cfg.exploration
        answers = self._model.act(parsed, ex.samples, ex.temperature) if parsed else []
        return [
            ActResponse.model_validate({**a.response, "logged": False, "evaluable": False}).model_dump(
                mode="json"
            )
            for a in answers
        ]


def load_policy(
    registry: str | Path,
    version: str = "production",
    *,
    config: Config = None,
    overrides: list[str] | None = None,
) -> Policy:
    """Load policy ``version`` of ``registry`` (a version name or number, an alias, ``production``
    or ``latest``) with the ``serve`` config ``config`` (its ``exploration`` and ``runtime.seed``
    apply). ``registry`` and ``version`` may be given by position."""
    from serving.acting import LoadedModel

    cfg = config_of("serve", config, overrides)
    return Policy(LoadedModel.load(str(registry), version, cfg.runtime.seed), cfg)


def create_app(
    *,
    registry: str | Path,
    events: str | Path,
    policy: str = "production",
    config: Config = None,
    overrides: list[str] | None = None,
) -> FastAPI:
    """The FastAPI app of ``parpo serve``: serves ``policy`` of ``registry`` (a pointer such as
    ``production`` is followed as it moves), logs decisions and events under ``events``. Routes:
    ``/v1/act``, ``/v1/act:batch``, ``/v1/events``, ``/v1/models``, ``/livez``, ``/readyz``,
    ``/metrics`` (docs/serving.md). The policy loads when the app starts (its lifespan)."""
    return checked_app(Path(registry), policy, Path(events), config_of("serve", config, overrides),
                       ("registry", "events"))  # fmt: skip


def checked_app(
    registry: Path, policy: str, events: Path, cfg: ServeConfig, names: tuple[str, str]
) -> FastAPI:
    """``serving.app.create_app`` after the checks that make a wrong path or version one error
    line now rather than a failure once serving; ``names`` name the registry and events inputs."""
    from parpo_core.artefacts import Registry
    from serving.app import create_app as app_of

    folder_or_error(registry, names[0])
    folder_or_error(events, names[1])
    Registry(registry).resolve("policy", policy)
    return app_of(registry, policy=policy, events=events, cfg=cfg)


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
