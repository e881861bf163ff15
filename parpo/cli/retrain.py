"""``parpo retrain``: fresh logs -> warm-started reward model -> gate -> promote (docs/retraining.md).

Exit status for cron and schedulers: 0 promoted (or no new data), 3 gated (production
unchanged, the candidate kept as ``challenger``), 1 error (one ``error:`` line).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from parpo.cli.console import REGISTRY_ENV


def retrain(
    registry: Annotated[
        Path, typer.Option("--registry", "-r", help="Registry folder (REG).", envvar=REGISTRY_ENV)
    ],
    data: Annotated[
        Path, typer.Option("--data", "-d", help="The dataset after the new logs were ingested into it.")
    ],
    base: Annotated[str, typer.Option("--base", help="Reward version to start from.")] = "production",
    window: Annotated[
        str, typer.Option("--window", help="Train rows: all, or last:<N>d (the last N days) plus --replay.")
    ] = "all",
    replay: Annotated[
        float,
        typer.Option("--replay", min=0.0, max=1.0, help="Share of older train rows kept with --window."),
    ] = 0.0,
    policy: Annotated[
        bool,
        typer.Option(
            "--policy/--no-policy",
            help="Also retrain the production policy against the new reward version (warm start).",
        ),
    ] = False,
    anchors: Annotated[
        str, typer.Option("--anchors", help="The base policy's anchors: carry, decay or reset.")
    ] = "decay",
    policy_updates: Annotated[
        int | None,
        typer.Option(
            "--policy-updates", min=1, help="Updates of the policy run (default: the retrain preset's)."
        ),
    ] = None,
    gate: Annotated[str, typer.Option("--gate", help="Gate preset (default) or a YAML file.")] = "default",
    lr_scale: Annotated[
        float,
        typer.Option(
            "--lr-scale",
            min=0.0,
            help="The candidate trains at the base's learning rate times this (fine-tuning).",
        ),
    ] = 0.2,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome record as JSON.")] = False,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Reward config overrides, e.g. train.epochs=20.", show_default=False),
    ] = None,
) -> None:
    """Retrain the reward model on fresh data, gate it against production, promote it or keep it
    as `challenger`. Exit 0 promoted or no new data, 3 gated, 1 error."""
    from pydantic import ValidationError

    from parpo.retrain.job import RetrainRequest
    from parpo.retrain.job import retrain as run
    from parpo_core.errors import UserError

    try:
        req = RetrainRequest(
            registry=registry, data=data, base=base, window=window, replay=replay, policy=policy,
            anchors=anchors, policy_updates=policy_updates, gate=gate, lr_scale=lr_scale,
            overrides=list(overrides or []),
        )  # fmt: skip
    except ValidationError as e:
        err = e.errors()[0]
        flag = str(err["loc"][0]).replace("_", "-")
        raise UserError(f"--{flag}: {err['msg']} (got {err.get('input')!r})") from None
    out = run(req)
    if as_json:
        typer.echo(json.dumps(out.record | {"replayed": out.replayed}, indent=2))
    else:
        r = out.record
        again = " (the answer of an earlier run on the same inputs)" if out.replayed else ""
        base_names = ", ".join(f"{k}/{v}" for k, v in r["base"].items())
        typer.echo(f"{out.status}{again}: base {base_names}", nl=False)
        if "candidate" in r:
            typer.echo(", candidate " + ", ".join(f"{k}/{v}" for k, v in r["candidate"].items()), nl=False)
        typer.echo(f"; record {registry / 'retrain' / r['key'] / 'outcome.json'}")
        for why in (r.get("gate") or {}).get("why", []):
            typer.echo(f"  {why}")
    raise typer.Exit(out.code)
