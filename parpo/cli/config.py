"""``parpo config``: print a resolved config, its JSON Schema, or the reference page."""

from __future__ import annotations

import json
from typing import Annotated

import typer

app = typer.Typer(
    help="Show resolved configs (preset + overrides) and their JSON Schemas.", no_args_is_help=True
)

Group = Annotated[str, typer.Argument(help="Config group: data, reward, policy or serve.")]


@app.command()
def show(
    group: Group,
    config: Annotated[
        str | None, typer.Option("--config", "-c", help="Preset name or YAML file (default: the group's).")
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Dotted overrides, e.g. train.epochs=5.", show_default=False)
    ] = None,
) -> None:
    """Print the config a command would run with, every key resolved, as YAML."""
    import yaml

    from parpo.api.configs import resolved

    cfg = resolved(group, config, overrides)
    typer.echo(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), nl=False)


@app.command()
def schema(group: Group) -> None:
    """Print the group's JSON Schema (for editors that validate YAML)."""
    from parpo.api.configs import schema as group_schema

    typer.echo(json.dumps(group_schema(group), indent=2))


@app.command()
def reference() -> None:
    """Print docs/config-reference.md: every key of every group with its default and meaning."""
    from parpo.api.configs import reference_markdown

    typer.echo(reference_markdown(), nl=False)
