"""The policy steps of ``parpo retrain --policy`` (``parpo.retrain.job`` runs them): the inputs
(the production policy and the run's length), the candidate (grown, trained, published) and
the gate's paired per-task checks. The warm start itself is ``parpo.retrain.policy``."""

from __future__ import annotations

import shutil
import time
from typing import TYPE_CHECKING, Any

from parpo.retrain.gate import GateConfig, judge
from parpo.retrain.journal import Journal, crash_point, digest, published_by

if TYPE_CHECKING:
    from parpo.retrain.job import RetrainRequest


def policy_inputs(reg, req: RetrainRequest) -> dict[str, Any]:
    """The production policy (the base of ``--policy``), its config for the warm-started run, and
    the run's settings (updates from the ``retrain`` policy preset unless given)."""
    from parpo.presets import apply_overrides, read_preset, validate
    from parpo.trainer.config import PolicyTrainConfig

    v = reg.open("policy", "production")  # verified
    updates = req.policy_updates or read_preset("policy", "retrain")[1]["train"]["updates"]
    cfg = validate(PolicyTrainConfig, apply_overrides(v.config, [f"train.updates={updates}"]), v.label)
    return {"base": v.name, "cfg": cfg, "anchors": req.anchors, "updates": updates}


def policy_candidate(reg, j: Journal, ds, policy: dict[str, Any], reward: str, say) -> str:
    """The candidate policy: warm-started from the production policy against the candidate reward
    version (``parpo.retrain.policy``), a short run, published with the base as parent."""
    from parpo.env.source import EnvSource
    from parpo.policy.bundle import PolicyBundle
    from parpo.retrain.policy import carried_anchors, carried_memory, grow
    from parpo.trainer.loop import PolicyInit
    from parpo.trainer.pipeline import train_and_publish

    rec = j.read("policy")
    if rec is not None:
        return rec["version"]
    cfg = policy["cfg"]
    train_key = digest({"reward": reward, "base": policy["base"], "anchors": policy["anchors"],
                        "config": cfg.model_dump(mode="json")})[:16]  # fmt: skip
    found = published_by(reg, "policy", train_key)
    t0 = time.perf_counter()
    reused, warm = found is not None, {}
    if found is None:
        bundle = PolicyBundle.load(reg.root, policy["base"])
        src = EnvSource.load(ds.root, reg.root, reward, cfg.env)
        grown, predicted = grow(bundle, src.reward_model, src.catalogue)
        anchors = carried_anchors(bundle, policy["anchors"])
        warm = {"items_from_features": predicted, "anchors": policy["anchors"],
                "anchor_users": 0 if anchors is None else int(anchors["user"].numel())}  # fmt: skip
        say(f"training the candidate policy from {bundle.version.label} ({cfg.train.updates} updates)")
        memory = carried_memory(bundle)
        carried = grown.featurizer.memory if memory is not None else None
        warm["memory_skills"] = None if carried is None else int(carried.graph.skills.size)
        run = j.path / "policy-run"
        shutil.rmtree(run, ignore_errors=True)
        out = train_and_publish(
            cfg, ds.root, reg.root, reward_version=reward, run_dir=run, preset=f"retrain of {policy['base']}",
            init=PolicyInit(grown.net.state_dict(), anchors, memory), parent=policy["base"],
            extra={"retrain_key": train_key, "warm_start": warm},
        )  # fmt: skip
        found = out.version.name
    crash_point("policy-published")
    record = {"version": found, "parent": policy["base"], "train_key": train_key, "reused": reused}
    j.write("policy", record | {"warm_start": warm, "seconds": round(time.perf_counter() - t0, 3)})
    return found


def policy_checks(reg, production: str, cand: dict[str, str], ds, gate: GateConfig) -> list[dict[str, Any]]:
    """The gate's policy checks: candidate and production (grown to the new catalogue, reading its
    own reward version) greedy on the same held-out tasks of the new data, paired per task."""
    import numpy as np
    import polars as pl

    from parpo.env.source import EnvSource
    from parpo.evaluation.sample import sample_tasks
    from parpo.policy.bundle import PolicyBundle
    from parpo.retrain.policy import grow, per_task

    mine = PolicyBundle.load(reg.root, cand["policy"])
    theirs = PolicyBundle.load(reg.root, production)
    src = EnvSource.load(ds.root, reg.root, cand["reward"], mine.env)
    prod, _ = grow(theirs, theirs.reward_model, src.catalogue)
    tasks = {p: sample_tasks(src.tasks(p, capped=False), gate.tasks, gate.seed) for p in ("warm", "cold")}
    env = src.env()
    a, b = per_task(env, mine.policy, tasks, gate.seed), per_task(env, prod, tasks, gate.seed)
    joined = a.join(b, on=["part", "task_id"], suffix="_prod") if a.height else a
    checks = []
    for c in gate.policy:
        rows = joined.filter(pl.col("part") == c.set) if joined.height else joined
        if joined.height and f"{c.metric}_prod" not in rows.columns:
            why = f"no {c.metric} in these episodes (true_preference needs data with a known truth)"
            checks.append(
                {"kind": "policy"} | c.model_dump() | {"n_users": 0, "result": "skipped", "why": why}
            )
            continue
        va, vb = (
            rows[m].to_numpy() if m in rows.columns else np.zeros(0) for m in (c.metric, f"{c.metric}_prod")
        )
        checks.append({"kind": "policy"} | judge(c, va.astype(float), vb.astype(float), gate))
    return checks


def ope_checks(reg, production: str, cand: dict[str, str], ds, gate: GateConfig) -> list[dict[str, Any]]:
    """The gate's off-policy checks: candidate and production evaluated on the sampled server
    decisions the new data holds (``parpo.evaluation.ope.policy``), each logged request's terms
    summed and scaled so their mean is the estimate per slot, paired per request."""
    import numpy as np

    from parpo.evaluation.ope.estimators import ESTIMATORS, NEEDS_REWARD_MODEL, EstimatorConfig
    from parpo.evaluation.ope.policy import sampled_loggers, served_feedback
    from parpo.evaluation.ope.reward_model import cross_fit
    from parpo.policy.bundle import PolicyBundle

    if not gate.ope:
        return []
    loggers = sampled_loggers(ds.root)
    if not loggers:
        why = "the data holds no sampled server decisions"
        return [
            {"kind": "ope"} | c.model_dump() | {"n_users": 0, "result": "skipped", "why": why}
            for c in gate.ope
        ]
    bundles = [PolicyBundle.load(reg.root, v) for v in (cand["policy"], production)]
    checks = []
    for c in gate.ope:
        per_request = []
        for bundle in bundles:
            sv = served_feedback(ds.root, bundle, logging_policies=loggers, temperature=c.temperature,
                                 samples=c.samples, seed=gate.seed)  # fmt: skip
            fb = (
                sv.fb.with_q_hat(cross_fit(sv.fb, seed=gate.seed))
                if c.metric in NEEDS_REWARD_MODEL
                else sv.fb
            )
            terms = ESTIMATORS[c.metric](fb, EstimatorConfig()).num
            per_request.append(
                np.bincount(sv.slate, weights=terms, minlength=len(sv.order)) * len(sv.order) / fb.n
            )
        checks.append({"kind": "ope", "loggers": loggers} | judge(c, per_request[0], per_request[1], gate))
    return checks
