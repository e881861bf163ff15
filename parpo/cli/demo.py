"""``parpo demo``: the main job end to end on the embedded synthetic default.

Synthesise a log with known interest/conformity, ingest it (with validation, id
maps and splits), print the summary, train a DICE reward model on the
``intervened`` split and publish it to ``RUN/registry``, train a PARPO policy
against it (published there too), evaluate the policy on held-out warm and
cold tasks next to the reference agents, serve it to simulated users (clicks
from the synthetic world's true interest), estimate greedy serving off-policy
from those logs, and write the offline report. Each run writes into a fresh folder,
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

#: The demo's policy schedule: a quarter of the `default` preset's rollouts (60 updates x 128
#: tasks), so that its policy training stays within a few minutes on 2 cores.
DEMO_POLICY = ["train.updates=30", "train.tasks_per_update=64"]
#: Requests the demo serves (sampled, so that their logs can evaluate other policies off-policy).
DEMO_REQUESTS = 200


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
    """Run PARPO end to end on synthetic data: synthesise, train a reward model and a policy,
    evaluate, serve, estimate off-policy from the served logs, report."""
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
    console.print(f"1/8 synthesise {cfg.synth.n_users:,} users x {cfg.synth.n_items:,} items -> {data}")
    summary = gen.write(cfg.synth, data, splits=False)
    write_resolved(cfg, run / "config.yaml")
    console.print("2/8 splits and summary")
    _write_splits(data, cfg)
    console.print(summary_table(summary))
    console.print(f"dataset {data} (fingerprint {summary['fingerprint'][:12]})")

    from parpo.cli.reward import load_config, run_training

    rcfg = load_config("dice", None, ["train.progress_bar=false", *reward_over])
    rcfg.split.seed, rcfg.split.positives = cfg.split.seed, cfg.split.positives
    rcfg.split.algorithm = cfg.split.algorithm
    rcfg.runtime.seed = cfg.runtime.seed
    console.print(f"3/8 train a DICE reward model on the {rcfg.split.name} split -> {run / 'registry'}")
    outcome = run_training(rcfg, data, run / "registry", run / "reward", None, label="dice")
    if outcome is None:  # a DDP rank other than 0
        return

    from parpo.cli.policy import load_config as policy_config
    from parpo.evaluation.policy_eval import evaluate_policy
    from parpo.trainer.pipeline import train_and_publish

    pcfg = policy_config("default", None, None, ["train.progress_bar=true", *DEMO_POLICY, *policy_over])
    t = pcfg.train
    console.print(
        f"4/8 train a policy with {pcfg.advantage.estimator} ({t.updates} updates x {t.tasks_per_update} tasks x "
        f"G = {t.group_size}) -> {run / 'registry'}"
    )
    trained = train_and_publish(pcfg, data, run / "registry", run_dir=run / "policy", preset="default")
    if trained is None:
        return
    write_resolved(pcfg, run / "policy" / "config.yaml")
    console.print("5/8 evaluate the policy on held-out tasks (greedy) next to the reference agents")
    path, result = evaluate_policy(run / "registry", data, trained.version.name)
    from parpo.cli.policy import print_eval

    print_eval(result, path)
    console.print(
        f"6/8 serve the policy on 127.0.0.1 to {DEMO_REQUESTS} simulated requests (clicks from the true "
        "interest), stop the server"
    )
    _serve(run, data, DEMO_REQUESTS)
    console.print("7/8 ingest the served logs (--source parpo-events) and estimate greedy serving off-policy")
    _off_policy(run, trained.version.name)
    from parpo.evaluation.report import write_report

    console.print("8/8 write the offline report (HTML with figures, markdown summary)")
    html, md = write_report(run / "registry", run / "report", [trained.version.name])
    console.print(f"report: {html} (summary {md})")
    console.print(
        f"[green]done[/]: dataset {data}; reward model {outcome.version.label} and policy "
        f"{trained.version.label} in {run / 'registry'}; served logs in {run / 'events'}, off-policy estimate and report in {run / 'report'}"
    )


def _serve(run: Path, data: Path, n_requests: int, timeout_s: float = 300.0) -> None:
    """Start the server in a thread (port chosen by the OS), wait until ready, print a curl
    command and its answer, send ``n_requests`` sampled requests of random warm users (8 at a
    time: the server micro-batches them), post a click for each slate item a simulated user
    clicks, P = sigmoid(true interest - 1) / sqrt(position), then stop the server the graceful
    way (as on SIGTERM: drain, flush the logs)."""
    import json
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    import numpy as np
    import uvicorn

    from data_pipelines.dataset import Dataset
    from data_pipelines.errors import UserError
    from data_pipelines.synth import Truth
    from parpo.cli.console import console
    from serving.app import create_app
    from serving.config import ServeConfig

    truth = Truth(data)
    users = Dataset(data).interactions().select("user_id").drop_nulls().unique().sort("user_id").collect()
    rng = np.random.default_rng(0)
    picks = rng.choice(users.to_series().to_list(), size=n_requests)
    app = create_app(run / "registry", events=run / "events", cfg=ServeConfig(poll_s=0))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    try:
        while not (server.started and server.servers):
            if time.monotonic() > deadline or not thread.is_alive():
                raise UserError("the demo server did not start")
            time.sleep(0.05)
        base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        while httpx.get(f"{base}/readyz").status_code != 200:
            if time.monotonic() > deadline:
                raise UserError("the demo server did not become ready")
            time.sleep(0.1)
        bodies = [{"request_id": f"demo-{i + 1}", "user_id": str(u), "k": 5} for i, u in enumerate(picks)]
        console.print(
            f"curl -s {base}/v1/act -H 'content-type: application/json' -d '{json.dumps(bodies[0])}'"
        )
        with httpx.Client(base_url=base, timeout=120) as client, ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda b: client.post("/v1/act", json=b).json(), bodies))
            first = [(s["item_id"], round(s["propensity"], 3)) for s in answers[0].get("slate", [])]
            console.print(f"policy {answers[0].get('policy_version')} answered: {first}")
            shown = [(a["request_id"], b["user_id"], s) for a, b in zip(answers, bodies, strict=True)
                     for s in a.get("slate", [])]  # fmt: skip
            interest = truth.interest([u for _, u, _ in shown], [s["item_id"] for _, _, s in shown])
            p = 1.0 / (1.0 + np.exp(1.0 - interest)) / np.sqrt([s["position"] for _, _, s in shown])
            clicks = [
                {"request_id": rid, "position": s["position"], "event": "click"}
                for (rid, _, s), hit in zip(shown, rng.random(len(shown)) < p, strict=True)
                if hit
            ]
            for c in clicks:
                client.post("/v1/events", json=c).raise_for_status()
        console.print(
            f"{len(answers)} decisions, {len(shown)} impressions, {len(clicks)} clicks logged in {run / 'events'}"
        )
    finally:
        server.should_exit = True
        thread.join()


def _off_policy(run: Path, version: str) -> None:
    """Ingest the served logs and estimate the served version acting greedily from them."""
    from data_pipelines.adapters import open_source
    from data_pipelines.ingest import ingest
    from parpo.cli.eval import ope_version

    ingest(open_source("parpo-events", run / "events"), run / "served")
    ope_version(run / "served", version, run / "registry", explore=0.0)
