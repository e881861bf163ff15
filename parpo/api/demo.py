"""The end-to-end demo as a library function: ``demo_steps`` yields each step's title, then its
result, so a caller (``parpo demo``, a notebook) renders them as they come.

Steps: synthesise a log with known interest/conformity; cut its splits; train a DICE reward model
and publish it to ``RUN/registry``; train a PARPO policy against it (published there too);
evaluate the policy on held-out warm and cold tasks next to the reference agents; serve it to
simulated users (clicks from the true interest); ingest the served logs and estimate greedy
serving off-policy; write the offline report.

With ``loop=True`` (``parpo demo --loop``) the retraining loop follows (``loop_steps``): the world
drifts and the served events join its logs; ``parpo retrain --policy`` runs while a server that
follows ``production`` answers a steady trickle of requests; the new versions are evaluated on
the drifted world's truth next to the previous production policy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from serving.simulate import Traffic

#: The demo's policy schedule: a quarter of the `default` preset's rollouts (60 updates x 128
#: tasks), so that its policy training stays within a few minutes on 2 cores.
DEMO_POLICY = ["train.updates=30", "train.tasks_per_update=64"]
#: Requests the demo serves (sampled, so that their logs can evaluate other policies off-policy).
DEMO_REQUESTS = 200
STEPS = 8
LOOP_STEPS = 3
#: The loop's drift: two more rounds with new users and items, 30% of users' interests turned
#: (``parpo data synth --continue-from``; the retrain tests' shape).
LOOP_DRIFT = {"rounds": 2, "new_users": 100, "new_items": 200, "interest_drift": 0.3}


@dataclass
class Step:
    """Step ``number`` of ``STEPS`` starts: ``title`` says what it does."""

    number: int
    title: str


@dataclass
class Result:
    """Step ``number`` finished with ``value`` (its type depends on the step; see ``demo_steps``)."""

    number: int
    value: Any


@dataclass
class Served:
    """Step 6's result: the base URL it served on, the first request body and the traffic."""

    base_url: str
    first_request: dict[str, Any]
    traffic: Traffic
    events: Path


@dataclass
class Switch:
    """Step 10's result: the retrain's ``outcome`` and what a server following ``production``
    answered meanwhile: the first and last answers, requests sent, non-2xx answers, and the
    distinct (policy, reward) versions in the order they answered."""

    outcome: Any
    first: dict[str, Any]
    last: dict[str, Any]
    requests: int
    failed: int
    versions: list[tuple[str, str]]


def demo_steps(
    run: Path,
    data_cfg: Any,
    reward_cfg: Any,
    policy_cfg: Any,
    *,
    n_requests: int = DEMO_REQUESTS,
    serve_timeout_s: float = 300.0,
    loop: bool = False,
) -> Iterator[Step | Result]:
    """Run the demo into the fresh folder ``run``. Results, by step: 1 the dataset summary;
    2 the split paths; 3 the reward ``TrainOutcome`` (None on other DDP ranks: the demo stops
    there); 4 the ``PolicyOutcome``; 5 ``(eval path, eval result)``; 6 ``Served``; 7
    ``(OPE result, recorded path)``; 8 ``(report.html, summary.md)``; with ``loop``, steps 9-11
    of ``loop_steps``."""
    from data_pipelines import synth as gen
    from data_pipelines.dataset import Dataset
    from data_pipelines.splits import write_all
    from parpo.presets import write_resolved

    data = run / "data"
    synth = data_cfg.synth
    yield Step(1, f"synthesise {synth.n_users:,} users x {synth.n_items:,} items -> {data}")
    summary = gen.write(synth, data, splits=False)
    write_resolved(data_cfg, run / "config.yaml")
    yield Result(1, summary)

    yield Step(2, "splits and summary")
    yield Result(2, write_all(Dataset(data), seed=data_cfg.split.seed, rule=data_cfg.split.positives))

    from reward_models.pipeline import train_and_publish as train_reward

    registry = run / "registry"
    yield Step(3, f"train a DICE reward model on the {reward_cfg.split.name} split -> {registry}")
    outcome = train_reward(reward_cfg, data, registry, run / "reward", label="dice")
    yield Result(3, outcome)
    if outcome is None:  # a DDP rank other than 0
        return
    write_resolved(reward_cfg, outcome.run_dir / "config.yaml")

    from parpo.trainer.pipeline import train_and_publish as train_policy

    t = policy_cfg.train
    yield Step(
        4,
        f"train a policy with {policy_cfg.advantage.estimator} ({t.updates} updates x {t.tasks_per_update} "
        f"tasks x G = {t.group_size}) -> {registry}",
    )
    trained = train_policy(policy_cfg, data, registry, run_dir=run / "policy", preset="default")
    yield Result(4, trained)
    if trained is None:
        return
    write_resolved(policy_cfg, run / "policy" / "config.yaml")
    version = trained.version.name

    from parpo.evaluation.policy_eval import evaluate_policy

    yield Step(5, "evaluate the policy on held-out tasks (greedy) next to the reference agents")
    yield Result(5, evaluate_policy(registry, data, version))

    yield Step(
        6,
        f"serve the policy on 127.0.0.1 to {n_requests} simulated requests (clicks from the true "
        "interest), stop the server",
    )
    yield Result(6, serve_simulated(run, data, n_requests, timeout_s=serve_timeout_s))

    from data_pipelines.adapters import open_source
    from data_pipelines.ingest import ingest
    from parpo.evaluation.ope.policy import evaluate_served, record_served
    from parpo.policy.bundle import PolicyBundle

    yield Step(7, "ingest the served logs (--source parpo-events) and estimate greedy serving off-policy")
    ingest(open_source("parpo-events", run / "events"), run / "served")
    result = evaluate_served(run / "served", PolicyBundle.load(registry, version), temperature=0.0)
    yield Result(7, (result, record_served(registry, run / "served", result)))

    from parpo.evaluation.report import write_report

    yield Step(8, "write the offline report (HTML with figures, markdown summary)")
    yield Result(8, write_report(registry, run / "report", [version]))
    if loop:
        yield from loop_steps(run, timeout_s=serve_timeout_s)


def loop_steps(run: Path, *, timeout_s: float = 300.0) -> Iterator[Step | Result]:
    """The retraining loop on a demo run folder ``run`` (steps 1-8 done). Results: 9 the drifted
    dataset's summary (``served_rows``: the rows the served events added to it); 10 ``Switch``; 11
    ``(eval path, eval result)`` of the candidate policy (production if promoted, else the
    challenger) on the drifted world, with the previous production policy (grown to the new
    catalogue) as the agent ``before``."""
    from data_pipelines.adapters import open_source
    from data_pipelines.ingest import ingest
    from data_pipelines.synth import write_continuation
    from data_pipelines.synth.drift import ContinueConfig

    data, drifted, registry = run / "data", run / "data-drifted", run / "registry"
    drift = ContinueConfig(**LOOP_DRIFT)
    yield Step(
        9,
        f"drift the world ({drift.rounds} rounds, +{drift.new_users} users, +{drift.new_items} items, "
        f"{drift.interest_drift:.0%} of interests turned) and append the served events -> {drifted}",
    )
    drifted_rows = write_continuation(data, drifted, drift, splits=False)["rows_written"]
    summary = ingest(open_source("parpo-events", run / "events"), drifted)
    yield Result(9, summary | {"served_rows": summary["rows_written"] - drifted_rows})

    yield Step(
        10, "retrain the reward model and the policy, gate, promote, while a server follows production"
    )

    from parpo.env.source import EnvSource
    from parpo.evaluation.policy_eval import evaluate_policy
    from parpo.policy.agent import PolicyAgent
    from parpo.policy.bundle import PolicyBundle
    from parpo.retrain.policy import grow

    switch = retrain_while_serving(run, drifted, timeout_s=timeout_s)
    yield Result(10, switch)
    before = PolicyBundle.load(registry, switch.first["policy_version"])
    after = PolicyBundle.load(registry, switch.outcome.record["candidate"]["policy"])
    src = EnvSource.load(drifted, registry, after.reward_version, after.env)
    grown, _ = grow(before, before.reward_model, src.catalogue)
    role = "production now" if switch.outcome.status == "promoted" else "kept as challenger"
    yield Step(
        11,
        f"evaluate the candidate {after.version.name} ({role}) on the drifted world next to "
        f"{before.version.name} (as 'before')",
    )
    yield Result(
        11, evaluate_policy(registry, drifted, after.version.name, also=[PolicyAgent(grown, name="before")])
    )


def serve_simulated(run: Path, data: Path, n_requests: int, *, timeout_s: float = 300.0) -> Served:
    """Serve ``run/registry``'s production policy on 127.0.0.1 (logs in ``run/events``) to
    ``n_requests`` sampled requests of random users of ``data``, with clicks drawn from the
    synthetic world's true interest (``serving.simulate.interest_clicks``); stop the server."""
    import numpy as np

    from data_pipelines.dataset import Dataset
    from data_pipelines.synth import Truth
    from serving.app import create_app
    from serving.config import ServeConfig
    from serving.runner import serve_in_thread
    from serving.simulate import interest_clicks, simulate_traffic

    users = Dataset(data).interactions().select("user_id").drop_nulls().unique().sort("user_id").collect()
    rng = np.random.default_rng(0)
    picks = [str(u) for u in rng.choice(users.to_series().to_list(), size=n_requests)]
    app = create_app(run / "registry", events=run / "events", cfg=ServeConfig(poll_s=0))
    with serve_in_thread(app, timeout_s=timeout_s) as base:
        traffic = simulate_traffic(base, picks, interest_clicks(Truth(data).interest), k=5, seed=rng,
                                   request_prefix="demo")  # fmt: skip
    return Served(base, {"request_id": "demo-1", "user_id": picks[0], "k": 5}, traffic, run / "events")


def retrain_while_serving(
    run: Path, data: Path, *, timeout_s: float = 300.0, pause_s: float = 0.25
) -> Switch:
    """Serve ``run/registry``'s production (logs in ``run/events-loop``, the pointer polled every
    0.2 s) while one client asks ``/v1/act`` for random users of ``data`` every ``pause_s``; run
    ``parpo retrain --policy`` on ``data``; once promoted, wait until the answers name the new
    policy version (at most ``timeout_s``), then stop the client and the server."""
    import threading
    import time

    import httpx
    import numpy as np

    from data_pipelines.dataset import Dataset
    from parpo.retrain.job import RetrainRequest, retrain
    from parpo_core.artefacts import Registry
    from parpo_core.errors import UserError
    from serving.app import create_app
    from serving.config import ServeConfig
    from serving.runner import serve_in_thread

    registry = run / "registry"
    users = Dataset(data).idmap("users")["id"].to_list()
    answers: list[dict] = []
    failed = [0]
    stop = threading.Event()

    def client(base: str) -> None:
        rng = np.random.default_rng(1)
        with httpx.Client(base_url=base, timeout=30.0) as http:
            while not stop.is_set():
                body = {
                    "request_id": f"loop-{len(answers) + failed[0]}",
                    "user_id": str(rng.choice(users)),
                    "k": 5,
                }
                try:
                    r = http.post("/v1/act", json=body)
                except httpx.HTTPError:  # a dropped connection is a failed request, not a dead client
                    r = None
                if r is not None and r.is_success:
                    answers.append(r.json())
                else:
                    failed[0] += 1
                time.sleep(pause_s)

    app = create_app(registry, events=run / "events-loop", cfg=ServeConfig(poll_s=0.2))
    with serve_in_thread(app, timeout_s=timeout_s) as base:
        thread = threading.Thread(target=client, args=(base,), daemon=True)
        thread.start()
        try:
            outcome = retrain(RetrainRequest(registry=registry, data=data, policy=True), say=lambda _: None)
            want = (Registry(registry).pointer("policy", "production") or {}).get("version")
            deadline = time.monotonic() + timeout_s
            while not answers or answers[-1]["policy_version"] != want:
                if time.monotonic() > deadline or not thread.is_alive():
                    raise UserError(f"the server did not switch to policy {want} within {timeout_s:.0f} s")
                time.sleep(0.05)
        finally:
            stop.set()
            thread.join()
    seen = list(dict.fromkeys((a["policy_version"], a["reward_version"]) for a in answers))
    return Switch(outcome, answers[0], answers[-1], len(answers) + failed[0], failed[0], seen)
