"""``parpo policy``: train agent policies with PARPO (or GDPO, GRPO, Dr. GRPO, RLOO, or a critic:
GAE, turn GAE, skip-observation GAE, PACT), evaluate them
on held-out tasks next to the reference agents, and run batch inference.

Heavy imports (torch, Lightning, polars) happen inside the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from parpo.cli.console import REGISTRY_ENV
from parpo.cli.tracking import LoggerOpt, RunNameOpt, tracker_overrides

app = typer.Typer(
    help="Train, evaluate and run agent policies (tool calls + a personal slate) against a reward model.",
    no_args_is_help=True,
)

Overrides = Annotated[
    list[str] | None,
    typer.Argument(
        help="Dotted overrides, e.g. train.updates=30 policy.dim=64 runtime.devices=2.", show_default=False
    ),
]


def load_config(
    config: str,
    algo: str | None,
    group_size: int | None,
    overrides: list[str] | None,
    backend: str | None = None,
):
    """The ``policy`` preset with ``--algo``/``--group-size`` applied (they win over overrides).
    The config model is ``backend``'s (None: the one the preset names, else native); ``--backend
    llm`` reads preset ``llm-tiny`` in place of ``default``."""
    from parpo.algorithms import ADVANTAGES, VALUE_ESTIMATORS
    from parpo.api.configs import config_model, preset_backend
    from parpo.policy.backends import POLICY_BACKENDS
    from parpo.presets import load
    from parpo_core.names import NameRegistry

    if backend is not None:
        POLICY_BACKENDS[backend]  # an unknown name is one error line naming the known ones
    if backend == "llm" and config == "default":
        config = "llm-tiny"
    extra = []
    if algo is not None:
        known: NameRegistry[object] = NameRegistry("advantage estimator")
        known.update(ADVANTAGES)
        known.update(VALUE_ESTIMATORS)
        known[algo]  # an unknown name is one error line naming the closest
        extra.append(f"advantage.estimator={algo}")
    if group_size is not None:
        extra.append(f"train.group_size={group_size}")
    model = config_model("policy", backend or preset_backend("policy", config, overrides))
    return load(model, "policy", config, [*(overrides or []), *extra])


def _line(section: dict[str, Any]) -> str:
    from parpo.evaluation.headline import ORDER

    return "  ".join(f"{k} {section[k]:.3f}" for k in ORDER if k in section)


@app.command()
def train(
    data: Annotated[Path, typer.Option("--data", "-d", help="Dataset folder (see `parpo data ingest`).")],
    registry: Annotated[
        Path,
        typer.Option(
            "--registry",
            "-r",
            help="Registry with a reward model; the policy is published here.",
            envvar=REGISTRY_ENV,
        ),
    ],
    reward_version: Annotated[
        str | None,
        typer.Option("--reward-version", help="Reward version to train against (default: production)."),
    ] = None,
    algo: Annotated[
        str | None,
        typer.Option(
            "--algo",
            "-a",
            help="Advantage estimator by its registered name (default: the config's, parpo): group-relative "
            "(parpo, gdpo, grpo, dr_grpo, rloo) or value-based with a critic (gae, turn_gae, skip_obs_gae, "
            "pact); a wrong name lists the known ones.",
        ),
    ] = None,
    group_size: Annotated[
        int | None, typer.Option("--group-size", "-g", min=1, help="Rollouts per task, G.")
    ] = None,
    config: Annotated[
        str, typer.Option("--config", "-c", help="Preset (default) or a YAML file.")
    ] = "default",
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Run folder for logs and checkpoints (default runs/policy-...)."),
    ] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Continue exactly from RUN/last.ckpt.")
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print the result as one JSON object (progress goes to stderr)."),
    ] = False,
    backend: Annotated[
        str,
        typer.Option(
            "--backend", help="Policy backend: native (small transformer) or llm (a language model)."
        ),
    ] = "native",
    model: Annotated[
        Path | None, typer.Option("--model", help="llm: local Hugging Face model folder (policy.model).")
    ] = None,
    engine: Annotated[
        str | None, typer.Option("--engine", help="llm: rollout engine, hf or vllm (policy.engine).")
    ] = None,
    lora: Annotated[
        int | None,
        typer.Option("--lora", min=0, help="llm: LoRA rank, 0 for full fine-tuning (policy.lora.r)."),
    ] = None,
    logger: LoggerOpt = None,
    run_name: RunNameOpt = None,
    overrides: Overrides = None,
) -> None:
    """Train a policy on the reward version's split and publish it as a new `policy` version."""
    from parpo.api.configs import preset_backend
    from parpo.api.train import publish_policy
    from parpo.cli.console import console, stdout_for_json
    from parpo_core.errors import UserError

    llm = {"policy.model": model, "policy.engine": engine, "policy.lora.r": lora}
    given = [f"{k}={v}" for k, v in llm.items() if v is not None]
    if given and backend != "llm" and preset_backend("policy", config, overrides) != "llm":
        raise UserError("--model, --engine and --lora are options of --backend llm")
    cfg = load_config(
        config, algo, group_size, [*(overrides or []), *given, *tracker_overrides(logger, run_name)], backend
    )
    if getattr(cfg, "backend", "native") == "llm" and not cfg.policy.model:
        raise UserError("--backend llm needs --model PATH (a local Hugging Face model folder)")
    with stdout_for_json(as_json):
        outcome = publish_policy(cfg, data, registry, reward_version, out, resume, config)
    if outcome is None:
        return
    if as_json:
        typer.echo(json.dumps(outcome_json(outcome), default=float))
        return
    s = outcome.summary
    console.print(
        f"last updates: preference {s.get('reward/preference/mean', 0):.3f}  task_quality "
        f"{s.get('report/task_quality', 0):.3f}  hit@10 {s.get('report/hit@10', 0):.3f}; run folder {outcome.run_dir}"
    )
    typer.echo(f"published {outcome.version.label}")


def outcome_json(outcome: Any) -> dict[str, Any]:
    """``parpo policy train --json``: the published version, the reward version it was trained
    against and the means of the last updates' metrics."""
    return {
        "published": outcome.version.label,
        "version": outcome.version.name,
        "reward_version": outcome.version.lineage.reward,
        "run_dir": str(outcome.run_dir),
        "summary": outcome.summary,
    }


TASKS_OPTION = typer.Option(
    "--tasks", min=1, help="Tasks per part (warm, cold), a hash-stable sample (default 2000)."
)
FULL_OPTION = typer.Option("--full", help="Evaluate every task (no sample), plan selection included.")


def eval_sample(tasks: int | None, full: bool) -> Any:
    """The ``EvalSample`` of the ``--tasks`` / ``--full`` options."""
    from parpo.api.evaluate import eval_sample as sample

    return sample(tasks, full, ("--tasks", "--full"))


@app.command("eval")
def eval_(
    registry: Annotated[Path, typer.Option("--registry", "-r", help="Registry folder.", envvar=REGISTRY_ENV)],
    data: Annotated[Path, typer.Option("--data", "-d", help="The dataset the policy was trained on.")],
    version: Annotated[
        str | None, typer.Option("--version", "-v", help="Policy version (default: production).")
    ] = None,
    sample: Annotated[
        bool,
        typer.Option(
            "--sample", help="Sample actions (temperature of the policy) instead of acting greedily."
        ),
    ] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampling (with --sample).")] = 0,
    tasks: Annotated[int | None, TASKS_OPTION] = None,
    full: Annotated[bool, FULL_OPTION] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the whole result as JSON.")] = False,
) -> None:
    """Evaluate a policy on warm and cold held-out tasks next to the reference agents; record evals/."""
    from parpo.evaluation.policy_eval import evaluate_policy

    path, result = evaluate_policy(
        registry, data, version, greedy=not sample, seed=seed, sample=eval_sample(tasks, full)
    )
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    print_eval(result, path)


def print_eval(result: dict[str, Any], path: Path) -> None:
    """The warm and cold sections of a policy evaluation, one line per agent."""
    from parpo.cli.console import console
    from parpo.evaluation.headline import EXPOSURE_NOTE, oracle_share

    for part in ("warm", "cold"):
        r = result[part]
        available = r.get("tasks_available", r["n_tasks"])
        of = f" of {available}, hash-stable sample" if available > r["n_tasks"] else ""
        console.print(f"[bold]{part}[/bold] ({r['n_tasks']}{of} tasks)")
        if r["n_tasks"]:
            console.print(f"  policy         {_line(r.get('policy', {}))}")
            for name, m in r["baselines"].items():
                console.print(f"  {name:<14} {_line(m)}")
            share = oracle_share(r)
            if share is not None:
                console.print(
                    f"  share of the oracle's margin over popularity (true preference): {share:.1%}"
                )
            if "true_preference" in r.get("policy", {}):
                console.print(f"  ({EXPOSURE_NOTE})")
    console.print(f"plan diversity (bits): {result['plan_diversity']}")
    console.print(f"recorded {path}")


@app.command()
def predict(
    registry: Annotated[Path, typer.Option("--registry", "-r", help="Registry folder.", envvar=REGISTRY_ENV)],
    requests: Annotated[Path, typer.Option("--requests", help="Parquet of requests (see docs/policy.md).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Parquet of slates to write.")],
    version: Annotated[
        str | None, typer.Option("--version", "-v", help="Policy version (default: production).")
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Requests per batch.")] = 1024,
    as_json: Annotated[bool, typer.Option("--json", help="Print {out, slates} as one JSON object.")] = False,
) -> None:
    """Batch inference for nightly jobs: one slate (and its plan) per request, acting greedily."""
    from parpo.cli.console import console
    from parpo.policy.predict import predict_file

    n = predict_file(registry, requests, out, version, batch_size=batch_size)
    if as_json:
        typer.echo(json.dumps({"out": str(out), "slates": n}))
    else:
        console.print(f"wrote {n:,} slates to {out}")
