"""``parpo eval``: offline evaluation on logged data (off-policy estimators with intervals).

Heavy imports (polars, scikit-learn) happen inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from parpo.cli.console import REGISTRY_ENV
from parpo.cli.policy import FULL_OPTION, TASKS_OPTION, eval_sample

app = typer.Typer(help="Evaluate policies offline on logged data.", no_args_is_help=True)

OBD_POLICIES = ("uniform", "obd-bts")


@app.command()
def ope(
    logs: Annotated[
        Path,
        typer.Option(
            "--logs",
            "-l",
            help="Canonical dataset of logged impressions: OBD, or server logs (--source parpo-events).",
        ),
    ],
    policy: Annotated[
        str,
        typer.Option(
            "--policy", "-p", help="Evaluated policy: uniform, obd-bts (OBD logs), or a registry version."
        ),
    ],
    registry: Annotated[
        Path | None,
        typer.Option(
            "--registry", "-r", help="Registry holding --policy when it is a version.", envvar=REGISTRY_ENV
        ),
    ] = None,
    prior: Annotated[
        Path | None,
        typer.Option(
            "--prior", help="obd-bts: the Thompson-sampling prior, prior_bts.yaml of the OBD folder."
        ),
    ] = None,
    explore: Annotated[
        float,
        typer.Option("--explore", min=0.0, help="Version: sampling temperature evaluated (0: greedy)."),
    ] = 1.0,
    samples: Annotated[
        int, typer.Option("--samples", min=1, help="Version: episodes per logged request for pi_e.")
    ] = 64,
    reward: Annotated[
        str, typer.Option("--reward", help="Version: the feedback event that counts as the reward.")
    ] = "click",
    logging_policy: Annotated[
        list[str] | None,
        typer.Option(
            "--logging-policy", help="Version: use only these loggers' rows (default: every sampled one)."
        ),
    ] = None,
    n_boot: Annotated[
        int, typer.Option("--n-boot", min=2, help="Bootstrap resamples (shared by all).")
    ] = 500,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the folds, resamples and pi_e samples.")] = 0,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per estimator (and campaign).")
    ] = False,
) -> None:
    """Estimate a policy's reward per logged slot off-policy: IPS, SNIPS, DM, DR, SwitchDR, DRos
    (and replay on uniform logs), with 95% bootstrap intervals and overlap diagnostics.

    OBD logs: uniform or obd-bts, from the other policy's logs, next to its on-policy click rate.

    A registry version: from the server's sampled decisions (every logged request replayed),
    recorded in the version's evals/ where parpo eval report finds it."""
    from parpo_core.errors import UserError

    if policy not in OBD_POLICIES:
        if registry is None:
            raise UserError(
                f"--policy {policy!r}: choose {' or '.join(OBD_POLICIES)}, or a version with --registry"
            )
        ope_version(logs, policy, registry, explore=explore, samples=samples, reward=reward,
                    loggers=logging_policy, n_boot=n_boot, seed=seed, as_json=as_json)  # fmt: skip
        return
    if policy == "obd-bts" and (prior is None or not prior.is_file()):
        raise UserError(
            f"--policy obd-bts needs --prior PATH (prior_bts.yaml of the Open Bandit Dataset folder); got {prior}"
        )
    from parpo.cli.console import console
    from parpo.evaluation.ope.obd import campaigns, evaluate_obd

    for campaign in campaigns(logs, policy):
        result = evaluate_obd(logs, policy, campaign, prior, n_boot=n_boot, seed=seed)
        if as_json:
            for row in result["rows"]:
                typer.echo(json.dumps({**row, "overlap": result["overlap"]}))
            continue
        _print(console, campaign, result)


def ope_version(
    logs: Path,
    version: str,
    registry: Path,
    *,
    explore: float = 1.0,
    samples: int = 64,
    reward: str = "click",
    loggers: list[str] | None = None,
    n_boot: int = 500,
    seed: int = 0,
    as_json: bool = False,
) -> None:
    """``parpo eval ope --policy V``: estimate, record in V's evals/, print (or JSON lines)."""
    from parpo.api.evaluate import ope
    from parpo.cli.console import console
    from parpo_core.artefacts import Registry

    name = Registry(registry).resolve("policy", version).name
    with console.status(f"replaying the logged requests with {name}"):
        done = ope(logs=logs, registry=registry, version=version, explore=explore, samples=samples,
                   reward=reward, logging_policies=loggers, n_boot=n_boot, seed=seed)  # fmt: skip
    path, result = done.path, done.result
    if as_json:
        for row in result["rows"]:
            typer.echo(
                json.dumps({**row, "policy_version": result["policy_version"], "overlap": result["overlap"]})
            )
        return
    print_served(result, path)


def print_served(result: dict[str, Any], path: Path) -> None:
    """The estimates of ``parpo.evaluation.ope.policy.evaluate_served`` as a table, the overlap
    diagnostics and where they were recorded."""
    from rich.table import Table

    from parpo.cli.console import console

    ov, lg, reward = result["overlap"], result["logged"], result["reward_event"]
    console.print(
        f"{result['policy_version']} at explore {result['temperature']:g}, from {result['n_rows']:,} slots of "
        f"{result['n_requests']:,} requests served by {', '.join(result['logging_policies'])}"
    )
    t = Table(title=f"{reward} per slot, 95% intervals (B = {lg['n_boot']})", title_justify="left")
    for col in ("estimator", reward, "interval"):
        t.add_column(col, justify="left" if col == "estimator" else "right")
    for r in result["rows"]:
        t.add_row(r["estimator"], f"{r['estimate']:.4f}", f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]")
    t.add_row("logged", f"{lg['estimate']:.4f}", f"[{lg['ci_low']:.4f}, {lg['ci_high']:.4f}]", style="bold")
    console.print(t)
    floor, short = ov["propensity_floor_share"], ov["short_slate_share"]
    console.print(
        f"overlap: ESS {ov['ess']:,.0f} of {ov['n']:,} rows, weight mean {ov['weight_mean']:.2f}, "
        f"max {ov['weight_max']:.1f}, never taken {ov['share_never_taken']:.1%}, propensity at its 1/N "
        f"floor {'unknown' if floor is None else f'{floor:.1%}'}, slates shorter than k {short:.1%}"
    )
    if floor is not None and floor > 0.2:
        console.print(
            "[yellow]warning:[/] many logged propensities are at their 1/N floor: IPS and DR are biased "
            "down there (docs/evaluation.md); serve with more exploration samples"
        )
    if short > 0.05:
        console.print(
            "[yellow]warning:[/] the logger often served fewer than k items: per-slot IPS and DR then "
            "target different quantities (docs/evaluation.md); read them as bounds, not estimates"
        )
    console.print(f"recorded: {path}")


def _print(console: Any, campaign: str, result: dict[str, Any]) -> None:
    from rich.table import Table

    first, ov = result["rows"][0], result["overlap"]
    t = Table(
        title=f"{first['evaluated']} on {campaign}, from {first['n_logs']:,} {first['logs']} rows "
        f"(95% intervals, B = {first['n_boot']})",
        title_justify="left",
    )
    for col in ("estimator", "click rate", "interval", "rel. error"):
        t.add_column(col, justify="left" if col == "estimator" else "right")
    for r in result["rows"]:
        t.add_row(
            r["estimator"],
            f"{r['estimate']:.5f}",
            f"[{r['ci_low']:.5f}, {r['ci_high']:.5f}]",
            f"{r['relative_error']:.2f}",
        )
    t.add_row(
        "on-policy",
        f"{first['truth']:.5f}",
        f"[{first['truth_ci_low']:.5f}, {first['truth_ci_high']:.5f}]",
        f"n={first['n_truth']:,}",
        style="bold",
    )
    console.print(t)
    console.print(
        f"overlap: ESS {ov['ess']:,.0f} of {ov['n']:,} rows, weight max {ov['weight_max']:.1f}, "
        f"q99 {ov['weight_q99']:.2f}, never taken {ov['share_never_taken']:.1%}"
    )


def _versions(first: list[str] | None, ctx: typer.Context) -> list[str]:
    """``--policies V1 V2 ...``: click gives the option its first value and leaves the rest as
    extra arguments (unknown options are still refused); ``--policies V1 --policies V2`` works too."""
    return [*(first or []), *ctx.args]


EXTRA_ARGS = {"allow_extra_args": True}


@app.command(context_settings=EXTRA_ARGS)
def compare(
    ctx: typer.Context,
    registry: Annotated[Path, typer.Option("--registry", "-r", help="Registry folder.", envvar=REGISTRY_ENV)],
    policies: Annotated[
        list[str], typer.Option("--policies", "-p", help="Two or more policy versions: --policies V1 V2 ...")
    ],
    data: Annotated[Path, typer.Option("--data", "-d", help="The dataset the policies were trained on.")],
    sample: Annotated[
        bool, typer.Option("--sample", help="Sample actions instead of acting greedily.")
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampling and the resamples.")] = 0,
    n_boot: Annotated[int, typer.Option("--n-boot", min=2, help="Bootstrap resamples of the tasks.")] = 1000,
    tasks: Annotated[int | None, TASKS_OPTION] = None,
    full: Annotated[bool, FULL_OPTION] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Evaluate policy versions on the same held-out tasks and record, in each version's evals/,
    its paired differences against the others (mean over tasks, 95% bootstrap interval)."""
    from parpo.evaluation.compare import compare_policies

    versions = _versions(policies, ctx)
    paths, results = compare_policies(
        registry, data, versions, greedy=not sample, seed=seed, n_boot=n_boot, sample=eval_sample(tasks, full)
    )
    if as_json:
        typer.echo(json.dumps(results, indent=2))
        return
    _print_compare(results[0], paths)


def _print_compare(first: dict[str, Any], paths: list[Path]) -> None:
    from rich.table import Table

    from parpo.cli.console import console
    from parpo.evaluation.headline import EXPOSURE_NOTE, ordered

    for other, parts in first["against"].items():
        for part, sec in parts.items():
            t = Table(
                title=f"{first['policy_version']} − {other}, {part} ({sec['n_pairs']} paired tasks, 95% intervals)",
                title_justify="left",
            )
            for col in ("metric", "a", "b", "a − b", "interval"):
                t.add_column(col, justify="left" if col == "metric" else "right")
            metrics = {m: d for m, d in sec.items() if isinstance(d, dict)}
            for metric in ordered(metrics):
                d = metrics[metric]
                t.add_row(metric, f"{d['mean_a']:.4f}", f"{d['mean_b']:.4f}", f"{d['diff']:+.4f}",
                          f"[{d['ci_low']:+.4f}, {d['ci_high']:+.4f}]")  # fmt: skip
            if "true_preference" in metrics:
                t.caption, t.caption_justify = EXPOSURE_NOTE, "left"
            console.print(t)
    for p in paths:
        console.print(f"recorded {p}")


@app.command(context_settings=EXTRA_ARGS)
def report(
    ctx: typer.Context,
    registry: Annotated[Path, typer.Option("--registry", "-r", help="Registry folder.", envvar=REGISTRY_ENV)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for report.html and summary.md.")],
    policies: Annotated[
        list[str] | None,
        typer.Option("--policies", "-p", help="Policy versions (default: every version with an eval)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print {html, summary} as one JSON object.")
    ] = False,
) -> None:
    """A self-contained offline HTML report (and a markdown summary) of policy versions, from their
    evals/ and training logs."""
    from parpo.cli.console import console
    from parpo.evaluation.report import write_report

    html, md = write_report(registry, out, _versions(policies, ctx) or None)
    if as_json:
        typer.echo(json.dumps({"html": str(html), "summary": str(md)}))
    else:
        console.print(f"wrote {html} and {md}")
