"""Entry point of the ``parpo`` command.

Only typer and the tiny error module are imported here; every command imports
what it needs when it runs, so ``parpo --help`` stays fast and never loads
torch, Lightning or transformers.
"""

from __future__ import annotations

import sys

import typer

from parpo.cli.config import app as config_app
from parpo.cli.data import app as data_app
from parpo.cli.demo import demo
from parpo.cli.eval import app as eval_app
from parpo.cli.policy import app as policy_app
from parpo.cli.registry import app as registry_app
from parpo.cli.retrain import retrain
from parpo.cli.reward import app as reward_app
from parpo.cli.serve import serve
from parpo_core.errors import UserError

app = typer.Typer(
    name="parpo",
    help="PARPO: personalised agentic RL for e-commerce. Ingest logs, train reward models and "
    "policies, evaluate offline, serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
app.add_typer(data_app, name="data")
app.add_typer(reward_app, name="reward")
app.add_typer(policy_app, name="policy")
app.add_typer(registry_app, name="registry")
app.add_typer(eval_app, name="eval")
app.add_typer(config_app, name="config")
app.command("demo")(demo)
app.command("serve")(serve)
app.command("retrain")(retrain)


def main() -> None:
    """Run the CLI; user errors become one ``error:`` line and exit status 1."""
    from parpo.cli.console import hide_lightning_banner

    hide_lightning_banner()
    try:
        app()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
