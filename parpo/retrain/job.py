"""``parpo retrain``: fresh logs -> warm-started reward model -> held-out comparison -> gate ->
promote (or keep as ``challenger``), as one idempotent, crash-safe job (docs/retraining.md).

Steps, each ending in a record under ``REG/retrain/<key>/`` (``parpo.retrain.journal``):

1. ``read``     the dataset, the base version (verified), the id maps (they must extend the
                base's), the inputs' key. The base trained on exactly this data: ``no_new_data``.
2. ``heldout``  the ``old`` and ``new`` held-out sets, fixed before training, fingerprinted.
3. ``reward``   the candidate: warm-started from the base, trained on the window plus replay,
                published (its lineage names the base as parent and the retrain key, so a run
                killed after the publish finds it instead of training again).
   ``policy``   with ``--policy``: the production policy grown to the new catalogue, a short run
                against the candidate reward, published (``parpo.retrain.policy_steps``).
4. ``eval``     candidate and production ranked on both sets, user by user (policies: greedy on
                held-out tasks, and off-policy on the served decisions the data holds).
5. ``gate``     the checks of the gate config (``parpo.retrain.gate``).
6. ``promote``  pass: the intent, then the reward pointer, then the policy's (the commit point:
                servers follow the policy); fail: the candidates become ``challenger``.
7. ``outcome``  status and exit code (0 promoted or no new data, 3 gated).

A second run on the same inputs answers with the first run's outcome; a promotion a killed run
started is completed by the next run, whatever its inputs.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from parpo.retrain.gate import GateConfig, decide, judge
from parpo.retrain.journal import FOLDER, Journal, crash_point, digest, job_lock, journals, published_by
from parpo.retrain.policy import AnchorMode
from parpo.retrain.policy_steps import ope_checks, policy_candidate, policy_checks, policy_inputs
from parpo_core.config import StrictModel
from parpo_core.errors import UserError

EXIT = {"promoted": 0, "no_new_data": 0, "gated": 3}
CHALLENGER = "challenger"


class RetrainRequest(StrictModel):
    """What ``parpo retrain`` was asked (the CLI's options)."""

    registry: Path
    data: Path
    base: str = Field("production", description="the reward version to start from")
    window: str = Field("all", description="all | last:<N>d: the train rows the candidate sees")
    replay: float = Field(0.0, ge=0, le=1, description="share of older train rows replayed with a window")
    policy: bool = Field(False, description="also retrain the production policy against the new reward")
    anchors: AnchorMode = Field("decay", description="the base policy's anchors: carry, decay or reset")
    policy_updates: int | None = Field(
        None, ge=1, description="updates of the policy's warm-started run (None: the retrain preset's)"
    )
    gate: str = Field("default", description="gate preset or YAML file")
    lr_scale: float = Field(0.2, gt=0, description="the candidate's learning rate: the base's times this")
    overrides: list[str] = Field(default_factory=list, description="reward config overrides")


@dataclass
class Outcome:
    """The job's answer: ``status``, ``code`` (the exit status) and the ``outcome`` record;
    ``replayed``: the record of an earlier run on the same inputs."""

    status: str
    code: int
    record: dict[str, Any]
    replayed: bool = False


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def load_gate(name: str) -> GateConfig:
    from parpo.presets import load

    return load(GateConfig, "gate", name)


def retrain(req: RetrainRequest, say=_say) -> Outcome:
    """Run (or resume, or answer from an earlier run) the retrain ``req``; see the module docstring."""
    from parpo_core.artefacts import Registry, RegistryError
    from reward_models.warmstart import parse_window

    if not req.registry.is_dir():
        raise RegistryError(f"{req.registry}: no registry here; train and publish a reward model first")
    parse_window(req.window)
    gate = load_gate(req.gate)
    reg = Registry(req.registry)
    root = req.registry / FOLDER
    with job_lock(root, say):
        finish_promotions(reg, root, say)
        return _run(reg, root, req, gate, say)


def _run(reg, root: Path, req: RetrainRequest, gate: GateConfig, say) -> Outcome:
    from data_pipelines.dataset import Dataset
    from parpo.presets import apply_overrides, validate
    from reward_models.config import RewardConfig

    ds = Dataset(req.data)
    base = reg.open("reward", req.base)  # verified: a corrupted base is one line, nothing written
    label = f"{base.label}/config.yaml" + (" (with overrides)" if req.overrides else "")
    lr = validate(RewardConfig, base.config, base.label).train.lr * req.lr_scale
    cfg = validate(RewardConfig, apply_overrides(base.config, [f"train.lr={lr!r}", *req.overrides]), label)
    policy = policy_inputs(reg, req) if req.policy else None
    inputs = {
        "data_fingerprint": ds.fingerprint,
        "window": req.window,
        "replay": req.replay,
        "policy": policy and {k: policy[k] for k in ("anchors", "updates")},
        "overrides": req.overrides,
        "lr_scale": req.lr_scale,
        "gate": gate.model_dump(mode="json"),
    }
    inputs_digest = digest(inputs)
    for old in journals(root):  # these inputs already promoted the version that is now the base
        o = old.read("outcome")
        if o and o["inputs_digest"] == inputs_digest and (o.get("promoted") or {}).get("reward") == base.name:
            return Outcome(o["status"], o["exit_code"], o, replayed=True)
    production = reg.resolve("reward", "production").name  # what the candidate must beat
    bases = {"base_reward": base.name, "production": production, "base_policy": policy and policy["base"]}
    key = digest(inputs | bases)[:16]
    j = Journal(root / key)
    done = j.read("outcome")
    if done is not None:
        return Outcome(done["status"], done["exit_code"], done, replayed=True)
    try:
        return _steps(reg, j, req, cfg, gate, ds, base, production, policy, inputs, inputs_digest, say)
    except UserError as e:
        j.write("error", {"error": str(e)})
        raise


def _steps(
    reg, j: Journal, req, cfg, gate: GateConfig, ds, base, production: str, policy, inputs, inputs_digest, say
) -> Outcome:
    from parpo.retrain.heldout import held_out
    from reward_models.warmstart import check_extends

    check_extends(base.path, base.lineage.data_fingerprint, ds)
    meta = base.metadata
    head = {
        "key": j.key,
        "inputs_digest": inputs_digest,
        "base": {"reward": base.name} | ({"policy": policy["base"]} if policy else {}),
        "production": {"reward": production} | ({"policy": policy["base"]} if policy else {}),
    }
    if j.read("read") is None:
        j.write(
            "read",
            head
            | {
                "inputs": inputs,
                "data": str(req.data),
                "base_data_fingerprint": base.lineage.data_fingerprint,
                "users": {"base": meta.get("n_users"), "data": ds.idmap("users").height},
                "items": {"base": meta.get("n_items"), "data": ds.idmap("items").height},
            },
        )
    if base.lineage.data_fingerprint == ds.fingerprint:
        say(f"no new data: {base.label} was trained on this dataset ({ds.fingerprint[:12]})")
        return _finish(j, "no_new_data", head | {"data_fingerprint": ds.fingerprint})
    t0 = time.perf_counter()
    h = held_out(ds, cfg.split, base.lineage.data_fingerprint, meta.get("n_users", 0), meta.get("n_items", 0))
    sets = j.read("heldout") or j.write("heldout", h.record | {"seconds": round(time.perf_counter() - t0, 3)})
    for name in ("old", "new"):  # fixed before training: the same sets on a resumed run
        if sets[name]["fingerprint"] != h.record[name]["fingerprint"]:
            raise UserError(
                f"{j.path}: held-out set {name} changed since the run began; delete the folder to start over"
            )
    cand = {"reward": _candidate(reg, j, req, cfg, ds, base, say)}
    if policy:
        cand["policy"] = policy_candidate(reg, j, ds, policy, cand["reward"], say)
    evaluated = _evaluate(j, reg, head["production"], cand, h, gate, ds)
    decision = j.read("gate") or j.write(
        "gate",
        head
        | {
            "candidate": cand,
            "heldout": {n: sets[n]["fingerprint"] for n in ("old", "new")},
            "checks": evaluated["checks"],
            "config": gate.model_dump(mode="json"),
            **decide(evaluated["checks"]),
        },
    )
    summary = head | {
        "data_fingerprint": ds.fingerprint,
        "candidate": cand,
        "gate": {"passed": decision["passed"], "why": decision["why"]},
        "heldout": decision["heldout"],
        "seconds": {"eval_and_gate": evaluated["seconds"], "train": (j.read("reward") or {}).get("seconds")},
    }
    if not decision["passed"]:
        for kind, name in cand.items():
            reg.set_alias(kind, CHALLENGER, name)
        names = ", ".join(f"{k}/{v}" for k, v in cand.items())
        say(f"gated: {names} kept as {CHALLENGER}; production unchanged: " + "; ".join(decision["why"]))
        return _finish(j, "gated", summary | {"challenger": cand})
    return _promote(reg, j, summary, say)


def _candidate(reg, j: Journal, req, cfg, ds, base, say) -> str:
    """The candidate reward version: recorded, published by a killed run, or trained now."""
    from reward_models.pipeline import train_and_publish
    from reward_models.warmstart import TrainWindow, parse_window

    rec = j.read("reward")
    if rec is not None:
        return rec["version"]
    # What the weights depend on (not the gate): a rerun under another gate reuses the candidate.
    train_key = digest(
        {"data": ds.fingerprint, "base": base.name, "window": req.window, "replay": req.replay,
         "overrides": req.overrides, "lr_scale": req.lr_scale}
    )[:16]  # fmt: skip
    found = published_by(reg, "reward", train_key)
    t0 = time.perf_counter()
    reused = found is not None
    if found is None:
        window = TrainWindow(parse_window(req.window), req.replay, cfg.split.seed)
        run = j.path / "run"
        shutil.rmtree(run, ignore_errors=True)  # a killed run's half-written logs
        say(f"training the candidate from {base.label} on {ds.root} (window {window.label()})")
        outcome = train_and_publish(
            cfg, ds.root, reg.root, run, parent=base.name, label=f"retrain of {base.name}",
            window=window, extra={"retrain_key": train_key},
        )  # fmt: skip
        found = outcome.version.name
    crash_point("reward-published")
    record = {"version": found, "parent": base.name, "train_key": train_key, "reused": reused}
    j.write("reward", record | {"seconds": round(time.perf_counter() - t0, 3)})
    return found


def _evaluate(
    j: Journal, reg, production: dict[str, str], cand: dict[str, str], h, gate: GateConfig, ds
) -> dict[str, Any]:
    """Per-user metrics of both reward versions on both sets, paired (and, with a policy, the
    policy checks); the judged checks (``eval`` record)."""
    import numpy as np

    from parpo.retrain.heldout import per_user_metrics
    from reward_models.pipeline import cold_profiles
    from reward_models.readout import RewardModel
    from reward_models.warmstart import train_profiles

    rec = j.read("eval")
    if rec is not None:
        return rec
    t0 = time.perf_counter()
    profiles = cold_profiles(h.data.cold_profile) | train_profiles(h.data)
    models = {"candidate": cand["reward"], "production": production["reward"]}
    m = {
        k: per_user_metrics(RewardModel.load(reg.resolve("reward", v)), h, profiles)
        for k, v in models.items()
    }
    checks, means = [], {}
    for c in gate.reward:
        a, b = m["candidate"][c.set], m["production"][c.set]
        va, vb = a.get(c.metric, np.zeros(0)), b.get(c.metric, np.zeros(0))
        ok = ~(np.isnan(va) | np.isnan(vb))
        checks.append({"kind": "reward"} | judge(c, va[ok], vb[ok], gate))
    for k, per_set in m.items():
        means[k] = {
            s: {n: float(np.nanmean(v)) for n, v in d.items() if n != "users" and v.size}
            for s, d in per_set.items()
        }
    if "policy" in cand:
        checks += policy_checks(reg, production["policy"], cand, ds, gate)
        checks += ope_checks(reg, production["policy"], cand, ds, gate)
    return j.write(
        "eval",
        {"versions": models, "means": means, "checks": checks, "seconds": round(time.perf_counter() - t0, 3)},
    )


def _promote(reg, j: Journal, summary: dict[str, Any], say) -> Outcome:
    """Write the intent, move the pointers (reward first; a policy's last), record the outcome."""
    intent = j.read("promote") or j.write("promote", {"candidate": summary["candidate"], "summary": summary})
    return _complete(reg, j, intent, say)


def _complete(reg, j: Journal, intent: dict[str, Any], say) -> Outcome:
    """Move ``production`` of the reward kind, then of the policy (the commit point: servers follow
    the policy, whose lineage names its reward). Idempotent: a killed run's moves are redone."""
    promoted = {}
    for kind in ("reward", "policy"):
        if kind not in intent["candidate"]:
            continue
        moved = reg.point(kind, "production", intent["candidate"][kind])
        crash_point(f"{kind}-promoted")
        ptr = reg.pointer(kind, CHALLENGER)
        if ptr and ptr["version"] == moved.version:
            reg.remove_alias(kind, CHALLENGER)  # an earlier gate kept it aside; it is production now
        say(f"promoted: {kind} production {moved.before} -> {moved.version}")
        promoted[kind] = moved.version
    return _finish(j, "promoted", intent["summary"] | {"promoted": promoted})


def finish_promotions(reg, root: Path, say) -> None:
    """Complete every promotion a killed run began (``promote`` record without ``outcome``)."""
    for j in journals(root):
        intent = j.read("promote")
        if intent is not None and j.read("outcome") is None:
            say(f"completing the promotion an interrupted retrain began ({j.path})")
            _complete(reg, j, intent, say)


def _finish(j: Journal, status: str, record: dict[str, Any]) -> Outcome:
    out = j.write("outcome", record | {"status": status, "exit_code": EXIT[status]})
    return Outcome(status, EXIT[status], out)
