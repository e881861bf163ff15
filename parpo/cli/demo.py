"""``parpo demo``: the main job end to end on the embedded synthetic default.

Synthesise a log with known interest/conformity, ingest it (with validation, id
maps and splits), print the summary, train a DICE reward model on the
``intervened`` split and publish it to ``RUN/registry``, train a PARPO policy
against it (published there too) and evaluate the policy on held-out warm and
cold tasks next to the reference agents. Each run writes into a fresh folder,
printed first, so re-running never mixes with an earlier run. Overrides starting
with ``reward.`` go to the reward config (``parpo demo reward.train.epochs=5``),
``policy.`` to the policy config (``policy.train.updates=10``); the others to
the data config.
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
    """Run PARPO end to end on synthetic data: synthesise, ingest, split, train a reward model,
    train a policy with PARPO, evaluate it."""
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

    data_over = [o for o in overrides or [] if not o.startswith(("reward.", "policy."))]
    reward_over = [o.removeprefix("reward.") for o in overrides or [] if o.startswith("reward.")]
    policy_over = [o.removeprefix("policy.") for o in overrides or [] if o.startswith("policy.")]
    cfg = _config(config, data_over)
    data = run / "data"
    console.print(f"1/5 synthesise {cfg.synth.n_users:,} users x {cfg.synth.n_items:,} items -> {data}")
    summary = gen.write(cfg.synth, data, splits=False)
    write_resolved(cfg, run / "config.yaml")
    console.print("2/5 splits and summary")
    _write_splits(data, cfg)
    console.print(summary_table(summary))
    console.print(f"dataset {data} (fingerprint {summary['fingerprint'][:12]})")

    from parpo.cli.reward import load_config, run_training

    rcfg = load_config("dice", None, ["train.progress_bar=false", *reward_over])
    rcfg.split.seed, rcfg.split.positives = cfg.split.seed, cfg.split.positives
    rcfg.runtime.seed = cfg.runtime.seed
    console.print(f"3/5 train a DICE reward model on the {rcfg.split.name} split -> {run / 'registry'}")
    outcome = run_training(rcfg, data, run / "registry", run / "reward", None, label="dice")
    if outcome is None:  # a DDP rank other than 0
        return

    from parpo.cli.policy import load_config as policy_config
    from parpo.evaluation.policy_eval import evaluate_policy
    from parpo.trainer.pipeline import train_and_publish

    pcfg = policy_config("default", None, None, ["train.progress_bar=true", *policy_over])
    t = pcfg.train
    console.print(
        f"4/5 train a policy with {pcfg.advantage.estimator} ({t.updates} updates x {t.tasks_per_update} tasks x "
        f"G = {t.group_size}) -> {run / 'registry'}"
    )
    trained = train_and_publish(pcfg, data, run / "registry", run_dir=run / "policy", preset="default")
    if trained is None:
        return
    write_resolved(pcfg, run / "policy" / "config.yaml")
    console.print("5/5 evaluate the policy on held-out tasks (greedy) next to the reference agents")
    path, result = evaluate_policy(run / "registry", data, trained.version.name)
    from parpo.cli.policy import print_eval

    print_eval(result, path)
    console.print(
        f"[green]done[/]: dataset {data}; reward model {outcome.version.label} and policy "
        f"{trained.version.label} in {run / 'registry'}"
    )
