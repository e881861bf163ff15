"""``parpo reward``: train, evaluate and publish stage-2 reward models (DICE, MF-BPR, LightGCN).

Heavy imports (torch, Lightning, polars) happen inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from parpo.cli.console import REGISTRY_ENV
from parpo.cli.tracking import LoggerOpt, RunNameOpt, tracker_overrides
from parpo_core.runs import is_rank_zero

app = typer.Typer(
    help="Train and evaluate preference-disentangled reward models; publish them to a registry.",
    no_args_is_help=True,
)

Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        help="Dotted overrides, e.g. model.dim=32 train.epochs=50 runtime.devices=2.", show_default=False
    ),
]


def _metric_line(section: dict[str, Any], keys=("ndcg@10", "recall@10", "hit@10", "mrr@10")) -> str:
    return "  ".join(f"{k} {section[k]:.4f}" for k in keys if isinstance(section.get(k), int | float))


def load_config(config: str, split: str | None, overrides: list[str] | None):
    from parpo.presets import load
    from reward_models.config import RewardConfig

    extra = [f"split.name={split}"] if split else []
    return load(RewardConfig, "reward", config, [*(overrides or []), *extra])


def run_training(
    cfg, data: Path, registry: Path, out: Path | None, resume: Path | None, label: str, quiet: bool = False
):
    """Train + evaluate + publish (rank 0 prints); returns the outcome or None on other ranks."""
    from parpo.api.train import publish_reward

    rank0 = is_rank_zero()
    outcome = publish_reward(cfg, data, registry, out, resume, label)
    if outcome is None or not rank0:
        return None
    if not quiet:
        print_outcome(outcome)
    return outcome


def print_outcome(outcome: Any) -> None:
    """Valid/test metrics, MostPop's, the synthetic truth's and the training summary of a
    ``reward_models.pipeline.TrainOutcome``."""
    from parpo.cli.console import console

    m = outcome.metrics
    console.print(f"valid: {_metric_line(m.get('valid', {}))}")
    console.print(f"test:  {_metric_line(m.get('test', {}))}")
    base = m.get("baselines", {}).get("mostpop", {}).get("test", {})
    if base:
        console.print(f"test (MostPop): {_metric_line(base)}")
    syn = m.get("synthetic", {})
    if syn:
        keys = ("interest_spearman", "conformity_spearman", "uniform.ndcg@10")
        console.print("synthetic: " + "  ".join(f"{k} {syn[k]:.4f}" for k in keys if k in syn))
    t = outcome.training
    console.print(
        f"trained {t['epochs']} epochs ({t['steps']} steps, best epoch {t['best_epoch']}), "
        f"{t['train_triples_per_s']:,.0f} triples/s, {t['evaluations']} evaluations in {t['valid_seconds']:.1f} s; "
        f"run folder {outcome.run_dir}"
    )


@app.command()
def train(
    data: Annotated[Path, typer.Option("--data", "-d", help="Dataset folder (see `parpo data ingest`).")],
    registry: Annotated[
        Path, typer.Option("--registry", "-r", help="Registry folder to publish to.", envvar=REGISTRY_ENV)
    ],
    config: Annotated[
        str, typer.Option("--config", "-c", help="Preset (dice, mf, lightgcn) or a YAML file.")
    ] = "dice",
    split: Annotated[str | None, typer.Option("--split", help="Split name (default: the config's).")] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Run folder for logs and checkpoints (default runs/reward-...)."),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option("--resume", help="Continue exactly from a checkpoint (RUN/checkpoints/last.ckpt)."),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print the result as one JSON object (progress goes to stderr)."),
    ] = False,
    logger: LoggerOpt = None,
    run_name: RunNameOpt = None,
    overrides: Overrides = None,
) -> None:
    """Train a reward model on a split, evaluate it, publish it as a new `reward` version (printed)."""
    from parpo.cli.console import stdout_for_json

    cfg = load_config(config, split, [*(overrides or []), *tracker_overrides(logger, run_name)])
    with stdout_for_json(as_json):
        outcome = run_training(cfg, data, registry, out, resume, label=config, quiet=as_json)
    if outcome is None:
        return
    if as_json:
        typer.echo(json.dumps(outcome_json(outcome), default=float))
    else:
        typer.echo(f"published {outcome.version.label}")


def outcome_json(outcome: Any) -> dict[str, Any]:
    """``parpo reward train --json``: the published version, its metrics and the training summary."""
    return {
        "published": outcome.version.label,
        "version": outcome.version.name,
        "run_dir": str(outcome.run_dir),
        "metrics": outcome.metrics,
        "training": outcome.training,
    }


@app.command("eval")
def eval_(
    registry: Annotated[Path, typer.Option("--registry", "-r", help="Registry folder.", envvar=REGISTRY_ENV)],
    data: Annotated[Path, typer.Option("--data", "-d", help="Dataset folder to evaluate on.")],
    version: Annotated[
        str | None,
        typer.Option("--version", "-v", help="Version name, number, latest or production (default)."),
    ] = None,
    split: Annotated[
        str | None, typer.Option("--split", help="Another split name (default: the one it was trained on).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result as JSON.")] = False,
) -> None:
    """Evaluate a version on DIR (its split recomputed there) and record evals/<fp>-<split>-<hash>.json."""
    from parpo.cli.console import console
    from reward_models.pipeline import evaluate_version

    path, result = evaluate_version(registry, data, version, split=split)
    if as_json:
        typer.echo(json.dumps(result, indent=2, default=float))
        return
    console.print(f"valid: {_metric_line(result.get('valid', {}))}")
    console.print(f"test:  {_metric_line(result.get('test', {}))}")
    console.print(f"recorded {path}")
