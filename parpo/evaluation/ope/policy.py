"""A published PARPO policy evaluated off-policy on the server's own logs.

The logs are a canonical dataset ingested with ``--source parpo-events``: every sampled
(evaluable) decision's slate is a set of impressions with the server's Monte-Carlo propensity,
every decision's request is a ``contexts`` row, and feedback events carry the reward (a
``click`` at the impression's request and position, by default). Greedy and fallback decisions
have propensity 1 (deterministic) and are left out: no evaluated policy that differs from them
is identified by their rows.

pi_e is computed once, before any estimator runs: the evaluated policy answers every logged
request ``samples`` times (the same request, user, candidates and slate size; sampling at
``temperature``, or one greedy episode at 0), and

    pi_e(item | request, position) = #{samples with item at position} / samples,

the serving propensity's own estimator (``serving.propensity``, without a served draw). It is
unbiased for the true marginal and IPS, DM and DR are linear in pi_e, so they stay unbiased
given the propensities (SNIPS, SwitchDR and DRos are not linear: their small bias grows with
fewer samples). A sample whose slate is shorter than a logged position puts no item there, so
its mass at that slot is 0: the estimand is the evaluated policy's expected reward per logged
(request, position) slot, the quantity the logging policy's own click rate measures. That is
IPS's target only when the logger fills every slate to its ``k``: a logger that sometimes
stops short logs fewer slots than IPS's numerator counts on, and ``short_slate_share`` (logged
requests with fewer than ``k`` items) says how often that happened. Rows of one slate share a
user and a draw, so the bootstrap resamples requests, not rows. The action set is every item logged or sampled: an item in neither has pi_e = 0
and is never logged, so it adds nothing to any estimator.

The logged propensity is itself an N-sample estimate that counts the served draw, p_hat =
(1 + Binomial(N - 1, p)) / N, whose inverse has expectation (1 - (1 - p)^N) / p: IPS and DR are
unbiased for items the logger shows with p >> 1/N and biased down, by that factor, for the
rest. ``propensity_floor_share`` (rows whose propensity is 1/N: only the served draw put the
item there) says how much of the log is in that regime; when it is large, serve with more
samples (the factor differs by item, so no estimator here corrects it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from parpo.evaluation.ope.bootstrap import bootstrap
from parpo.evaluation.ope.estimators import Terms
from parpo.evaluation.ope.evaluate import evaluate_feedback
from parpo.evaluation.ope.feedback import LoggedFeedback
from parpo.evaluation.ope.logs import read_logs
from parpo_core.errors import DataError

if TYPE_CHECKING:
    from parpo.policy.bundle import PolicyBundle

SCHEMA_VERSION = 1
#: Episodes per ``rollout`` call: bounds the batch's memory, not the result.
EPISODES_PER_BATCH = 4096


def sampled_loggers(root: str | Path) -> list[str]:
    """The logging policies of sampled decisions: ``parpo-events`` names greedy and fallback
    decisions ``<version>:greedy`` / ``<version>:<fallback>``, sampled ones by the bare version."""
    import polars as pl

    from data_pipelines.dataset import Dataset

    names = (
        Dataset(root)
        .interactions()
        .filter((pl.col("event") == "impression") & pl.col("propensity").is_not_null())
        .select(pl.col("logging_policy").unique())
        .collect()
        .to_series()
        .drop_nulls()
        .to_list()
    )
    return sorted(n for n in names if ":" not in n)


def logged_requests(
    root: str | Path, request_ids: Sequence[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """(request id -> the request as the API received it: ``category``, ``constraints``,
    ``text``, ``k``, ``candidates``; request id -> the served ``n_samples``), from the contexts
    table's ``request`` and ``n_samples`` features."""
    import polars as pl

    from data_pipelines.dataset import Dataset

    ds = Dataset(root)
    wanted = set(request_ids)

    def feature(key: str) -> pl.Expr:
        kv = pl.element().struct
        return pl.col("features").list.eval(kv.field("value").filter(kv.field("key") == key)).list.first()

    rows = (
        ds.contexts()
        .filter(pl.col("request_id").is_in(wanted))
        .select(
            "request_id",
            feature("request").alias("request"),
            feature("n_samples").cast(pl.Int64).alias("n"),
        )
        .drop_nulls("request")
    )
    out = {rid: json.loads(text) for rid, text, _ in rows.iter_rows()}
    n_samples = {rid: n for rid, _, n in rows.iter_rows() if n is not None}
    missing = wanted - set(out)
    if missing:
        raise DataError(
            f"{ds.root}: {len(missing):,} of {len(wanted):,} logged requests have no recorded request "
            f"(e.g. {sorted(missing)[0]!r}); ingest (or re-ingest) the server's logs with this "
            "version's --source parpo-events, which records each decision's request"
        )
    return out, n_samples


def slate_samples(
    bundle: PolicyBundle,
    requests: Sequence[tuple[str, str, dict[str, Any]]],
    samples: int,
    temperature: float,
    seed: int = 0,
) -> list[list[list[str]]]:
    """``samples`` slates of the evaluated policy for each
    ``(request_id, user_id, request)``: [R][samples][slate]. Greedy (``temperature`` <= 0) needs one."""
    from parpo.env.schema import Request

    agent = bundle.agent(temperature, seed)
    per = max(1, EPISODES_PER_BATCH // samples)
    out: list[list[list[str]]] = []
    for start in range(0, len(requests), per):
        tasks = []
        for rid, uid, req in requests[start : start + per]:
            request = Request.model_validate(
                {k: req.get(k) for k in ("category", "constraints", "text") if req.get(k)}
            )
            tasks.append(bundle.task(rid, uid, request, candidates=req.get("candidates"), k=req.get("k")))
        if temperature > 0:  # the serving propensity's own draws (``Policy.sample_slates``)
            out += [d.slates for d in bundle.sample_slates(agent, tasks, samples)]
            continue
        slates = bundle.rollout(agent, [t for t in tasks for _ in range(samples)])[0]["slate"].to_list()
        out += [slates[i : i + samples] for i in range(0, len(slates), samples)]
    return out


def position_marginals(
    slates: Sequence[Sequence[Sequence[str]]], rows: Sequence[tuple[int, int]], index: dict[str, int]
) -> np.ndarray:
    """pi_e [n, A] for logged rows ``(request r, 0-based position p)``: the share of request r's
    sampled slates (``slates[r]``) with each item (``index``: item -> action) at position p."""
    pi = np.zeros((len(rows), len(index)))
    for i, (r, p) in enumerate(rows):
        drawn = slates[r]
        for s in drawn:
            if p < len(s):
                pi[i, index[s[p]]] += 1.0
        pi[i] /= len(drawn)
    return pi


@dataclass
class Served:
    """The server's logs as the evaluated policy sees them (``served_feedback``): the feedback with
    pi_e, each row's request (``slate`` [n]: its index in ``order``), the request ids in first-seen
    order, the loggers, pi_e's samples per request, each row's served sample count (0: not
    recorded) and each request's k."""

    fb: LoggedFeedback
    slate: np.ndarray
    order: list[str]
    loggers: list[str]
    samples: int
    n_served: np.ndarray
    wanted: np.ndarray


def served_feedback(
    root: str | Path,
    bundle: PolicyBundle,
    *,
    logging_policies: Sequence[str] | None = None,
    reward_event: str = "click",
    samples: int = 64,
    temperature: float = 1.0,
    seed: int = 0,
) -> Served:
    """The sampled decisions of ``logging_policies`` (default: every sampled logger in the logs)
    with ``bundle``'s pi_e (module docstring)."""
    loggers = list(logging_policies) if logging_policies else sampled_loggers(root)
    deterministic = [n for n in loggers if ":" in n]
    if deterministic:
        raise DataError(
            f"logging policy {deterministic[0]!r} is a greedy or fallback one (propensity 1): "
            "only sampled decisions can be evaluated off-policy"
        )
    if not loggers:
        raise DataError(
            f"{root}: no sampled decisions in these logs (greedy and fallback decisions have "
            "propensity 1 and cannot be evaluated off-policy); serve with explore > 0"
        )
    logs = read_logs(root, loggers, reward_event=reward_event)
    if any(r is None for r in logs.request_ids):
        raise DataError(f"{root}: impressions without a request id are not server decisions")
    order = list(dict.fromkeys(logs.request_ids))
    asked, served_n = logged_requests(root, order)
    users = dict(zip(logs.request_ids, logs.user_ids, strict=True))
    n_samples = 1 if temperature <= 0 else samples
    slates = slate_samples(bundle, [(r, users[r], asked[r]) for r in order], n_samples, temperature, seed)
    items = sorted(set(logs.items).union(it for per in slates for s in per for it in s))
    index = {it: a for a, it in enumerate(items)}
    where = {r: i for i, r in enumerate(order)}
    pi_e = position_marginals(
        slates, [(where[r], int(p)) for r, p in zip(logs.request_ids, logs.position, strict=True)], index
    )
    action = np.array([index[logs.items[a]] for a in logs.action], dtype=np.int64)
    fb = LoggedFeedback(logs.context, action, logs.position, logs.reward, logs.pscore, pi_e)
    return Served(
        fb,
        np.array([where[r] for r in logs.request_ids]),
        order,
        loggers,
        n_samples,
        np.array([served_n.get(r, 0) for r in logs.request_ids]),
        np.array([asked[r].get("k") or bundle.env.k for r in order]),
    )


def evaluate_served(
    root: str | Path,
    bundle: PolicyBundle,
    *,
    logging_policies: Sequence[str] | None = None,
    reward_event: str = "click",
    samples: int = 64,
    temperature: float = 1.0,
    n_boot: int = 500,
    folds: int = 2,
    seed: int = 0,
) -> dict[str, Any]:
    """Estimate ``bundle``'s reward per slot from the sampled decisions of ``logging_policies``
    (default: every sampled logger in the logs). Returns ``{"rows": [one per estimator:
    estimate, ci_low, ci_high, se], "overlap", "logged": the loggers' own reward per slot with
    its interval, ...counts}``."""
    sv = served_feedback(
        root, bundle, logging_policies=logging_policies, reward_event=reward_event, samples=samples,
        temperature=temperature, seed=seed,
    )  # fmt: skip
    fb, slate = sv.fb, sv.slate
    result = evaluate_feedback(fb, n_boot=n_boot, folds=folds, seed=seed, clusters=slate)
    logged, _ = bootstrap({"logged": Terms(fb.reward)}, n_boot, seed=seed + 1, clusters=slate)
    known = sv.n_served > 0
    lengths = np.bincount(slate, minlength=len(sv.order))
    rows = [{"estimator": name, **est} for name, est in result["estimates"].items()]
    return {
        "schema_version": SCHEMA_VERSION,
        "policy_version": bundle.version.name,
        "logging_policies": sv.loggers,
        "reward_event": reward_event,
        "temperature": max(temperature, 0.0),
        "samples": sv.samples,
        "n_boot": n_boot,
        "seed": seed,
        "n_rows": fb.n,
        "n_requests": len(sv.order),
        "n_actions": fb.n_actions,
        "rows": rows,
        "overlap": {
            **result["overlap"],
            "propensity_floor_share": (  # p̂ = 1/N: only the served draw put the item there
                float(np.mean(fb.pscore[known] * sv.n_served[known] <= 1 + 1e-9)) if known.any() else None
            ),
            "short_slate_share": float(np.mean(lengths < sv.wanted)),
        },
        "logged": logged["logged"],
    }


def record_served(registry: str | Path, root: str | Path, result: dict[str, Any]) -> Path:
    """Record ``result`` (``evaluate_served``'s) as the evaluated version's add-only eval (split
    ``ope``, the logs' fingerprint, the evaluation's settings as its config); ``parpo eval
    report`` shows it in its off-policy section."""
    from data_pipelines.dataset import Dataset
    from parpo.policy.bundle import KIND
    from parpo_core.artefacts import Registry

    config = {
        k: result[k] for k in ("temperature", "samples", "reward_event", "logging_policies", "n_boot", "seed")
    }
    return Registry(registry).add_eval(
        KIND, result["policy_version"], Dataset(root).fingerprint, "ope", config, {"ope": result}
    )
