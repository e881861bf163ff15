"""``parpo demo``: the main job end to end on the embedded synthetic default.

Parses the options, runs ``parpo.api.demo.demo_steps`` and renders each step as it comes.
Overrides starting with ``reward.`` go to the reward config (``parpo demo
reward.train.epochs=5``), ``policy.`` to the policy config (``policy.train.updates=10``);
the others to the data config. Each run writes into a fresh folder, printed first, so
re-running never mixes with an earlier run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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
    loop: Annotated[
        bool,
        typer.Option(
            "--loop",
            help="Then the retraining loop: drift the world, append the served events, retrain and promote "
            "while a server follows production, evaluate before/after on the drifted world's truth.",
        ),
    ] = False,
) -> None:
    """Run PARPO end to end on synthetic data: synthesise, train a reward model and a policy,
    evaluate, serve, estimate off-policy from the served logs, report (with --loop: then drift,
    retrain, promote and evaluate again)."""
    from data_pipelines.data_config import DataConfig
    from parpo.api.demo import DEMO_POLICY, LOOP_STEPS, STEPS, Result, demo_steps
    from parpo.cli.console import console
    from parpo.cli.policy import load_config as policy_config
    from parpo.cli.reward import load_config as reward_config
    from parpo.presets import load
    from parpo_core.errors import UserError
    from parpo_core.runs import default_run_dir

    run = out or default_run_dir("demo")
    if run.exists() and any(run.iterdir()):
        raise UserError(f"{run} already exists and is not empty; the demo writes into a fresh folder")
    console.print(f"[bold]demo run folder:[/] {run.resolve()}")
    over = overrides or []
    cfg = load(
        DataConfig, "data", config or "default", [o for o in over if not o.startswith(("reward.", "policy."))]
    )
    rcfg = reward_config("dice", None, [
        "train.progress_bar=false", *(o.removeprefix("reward.") for o in over if o.startswith("reward.")),
        f"split.seed={cfg.split.seed}", f"split.algorithm={cfg.split.algorithm}", f"runtime.seed={cfg.runtime.seed}",
    ])  # fmt: skip
    rcfg = rcfg.model_copy(update={"split": rcfg.split.model_copy(update={"positives": cfg.split.positives})})
    pcfg = policy_config("default", None, None, [
        "train.progress_bar=true", *DEMO_POLICY, *(o.removeprefix("policy.") for o in over if o.startswith("policy.")),
    ])  # fmt: skip
    total = STEPS + LOOP_STEPS * loop
    for event in demo_steps(run, cfg, rcfg, pcfg, loop=loop):
        if isinstance(event, Result):
            _render(event.number, event.value, run)
        else:
            console.print(f"{event.number}/{total} {event.title}")


def _render(step: int, value: Any, run: Path) -> None:
    """Print step ``step``'s result (see ``demo_steps`` for what each step returns)."""
    import json

    from parpo.cli.console import console, summary_table
    from parpo.cli.eval import print_served
    from parpo.cli.policy import print_eval
    from parpo.cli.reward import print_outcome

    if step == 1:
        console.print(summary_table(value))
        console.print(f"dataset {run / 'data'} (fingerprint {value['fingerprint'][:12]})")
    elif step == 2 and value:
        console.print(f"splits: {', '.join(sorted(value))}")
    elif step == 3 and value is not None:
        print_outcome(value)
    elif step == 4 and value is not None:
        console.print(f"published {value.version.label}")
    elif step == 5:
        print_eval(value[1], value[0])
    elif step == 6:
        console.print(
            f"curl -s {value.base_url}/v1/act -H 'content-type: application/json' -d '{json.dumps(value.first_request)}'"
        )
        first = value.traffic.answers[0] if value.traffic.answers else {}
        slate = [(s["item_id"], round(s["propensity"], 3)) for s in first.get("slate", [])]
        console.print(f"policy {first.get('policy_version')} answered: {slate}")
        t = value.traffic
        console.print(
            f"{len(t.answers)} decisions, {t.impressions} impressions, {t.clicks} clicks logged in {value.events}"
        )
    elif step == 7:
        print_served(*value)
    elif step == 8:
        html, md = value
        console.print(f"report: {html} (summary {md})")
        console.print(
            f"[green]done[/]: dataset {run / 'data'}; reward model and policy in {run / 'registry'}; served logs "
            f"in {run / 'events'}, off-policy estimate and report in {run / 'report'}"
        )
    elif step == 9:
        console.print(summary_table(value))
        console.print(f"the served events added {value['served_rows']:,} rows")
    elif step == 10:
        out = value.outcome.record
        why = "; ".join(out["gate"]["why"]) if out.get("gate") else ""
        console.print(
            f"retrain: {out['status']} (exit code {out['exit_code']}){'; gate: ' + why if why else ''}"
        )
        chain = " -> ".join(f"policy {p} / reward {r}" for p, r in value.versions)
        console.print(
            f"the server answered {value.requests} requests during the retrain ({value.failed} failed): {chain}"
        )
    elif step == 11:
        print_eval(value[1], value[0])
