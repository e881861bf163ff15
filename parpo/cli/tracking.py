"""``--logger`` and ``--run-name`` of the training commands: shorthands for ``runtime.loggers`` and
``runtime.run_name`` (validated there, so a wrong tracker name is the config's one-line error)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

LoggerOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--logger",
        help="Experiment tracker, repeatable: tensorboard, mlflow, wandb (the CSV log is always written).",
    ),
]
RunNameOpt = Annotated[str | None, typer.Option("--run-name", help="The run's name in the trackers.")]


def tracker_overrides(loggers: list[str] | None, run_name: str | None) -> list[str]:
    """The ``runtime.*`` overrides the two options stand for (appended after the user's own)."""
    out = []
    if loggers:
        out.append(f"runtime.loggers=[csv,{','.join(loggers)}]")
    if run_name is not None:
        out.append(f"runtime.run_name={json.dumps(run_name)}")  # quoted: a name may hold ':' or spaces
    return out
