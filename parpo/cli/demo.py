"""``parpo demo``: the main job end to end on the embedded synthetic default.

For now: synthesise a log with known interest/conformity, ingest it (with
validation, id maps and splits), print the summary, then train a DICE reward
model on the ``intervened`` split and publish it to ``RUN/registry``. Each run
writes into a fresh folder, printed first, so re-running never mixes with an
earlier run. Overrides starting with ``reward.`` go to the reward config
(``parpo demo reward.train.epochs=5``); the others to the data config.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer


def demo(
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Run folder (must not exist). Default: runs/demo-<time>-<id>."),
    ] = None,
    config: Annotated[str | None, typer.Option("--config", "-c", help="Data preset or YAML file.")] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Dotted overrides, e.g. synth.n_users=500 or reward.train.epochs=5."),
    ] = None,
) -> None:
    """Run PARPO end to end on synthetic data: synthesise, ingest, split, train a reward model."""
    from data_pipelines.errors import UserError
    from parpo.cli.console import console

    run = out or Path("runs") / f"demo-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    if run.exists() and any(run.iterdir()):
        raise UserError(f"{run} already exists and is not empty; the demo writes into a fresh folder")
    console.print(f"[bold]demo run folder:[/] {run.resolve()}")

    from data_pipelines import synth as gen
    from parpo.cli.console import summary_table
    from parpo.cli.data import _config, _write_splits
    from parpo.presets import write_resolved

    data_over = [o for o in overrides or [] if not o.startswith("reward.")]
    reward_over = [o.removeprefix("reward.") for o in overrides or [] if o.startswith("reward.")]
    cfg = _config(config, data_over)
    data = run / "data"
    console.print(f"1/3 synthesise {cfg.synth.n_users:,} users x {cfg.synth.n_items:,} items -> {data}")
    summary = gen.write(cfg.synth, data, splits=False)
    write_resolved(cfg, run / "config.yaml")
    console.print("2/3 splits and summary")
    _write_splits(data, cfg)
    console.print(summary_table(summary))
    console.print(f"dataset {data} (fingerprint {summary['fingerprint'][:12]})")

    from parpo.cli.reward import load_config, run_training

    rcfg = load_config("dice", None, ["train.progress_bar=false", *reward_over])
    rcfg.split.seed, rcfg.split.positives = cfg.split.seed, cfg.split.positives
    rcfg.runtime.seed = cfg.runtime.seed
    console.print(f"3/3 train a DICE reward model on the {rcfg.split.name} split -> {run / 'registry'}")
    outcome = run_training(rcfg, data, run / "registry", run / "reward", None, label="dice")
    if outcome is not None:
        console.print(
            f"[green]done[/]: dataset {data}, reward model {outcome.version.label} in {run / 'registry'}"
        )
