"""Retraining on a drifting synthetic world: the warm-started retrain (``parpo retrain``) vs
training from scratch on the same data, and vs production (docs/retraining.md).

Per seed: a world of ``--users`` x ``--items`` for 8 rounds (the base's data), then 2 rounds
with 10% new users, ``--new-items`` new items and ``--drift`` of users' interests turned. The
base is trained on the first part; then, on the grown data,

- ``scratch``: ``reward_models.pipeline.train_and_publish`` from a fresh initialisation;
- ``warm``: ``parpo.retrain.job.retrain`` (warm start from the base, the default gate).

``warm_time_fraction`` = optimiser steps the warm run needed to first reach 99% of scratch's
best value of the selection metric (held-out impression log-loss: ``<= best / 0.99``) over the
steps scratch needed to reach it, each times its own seconds per step (``null``: never
reached). ``warm_quality_delta`` = warm minus scratch on the truth: ``interest_spearman``
(rank correlation with every user's true interest) and ``uniform.ndcg@10`` (the uniform-
exposure test). ``vs_production``: the gate's paired NDCG@10 difference on the newest data's
held-out pairs and its 95% interval. ``gate_seconds``: the held-out evaluation and the gate.
One JSON line per seed, then a summary line (means over seeds).

``--anchors`` (first seed only): a base policy (``--policy-updates`` x 2 updates) on the base
reward, then ``parpo retrain --policy`` once per anchor mode (carry, decay, reset) from the same
registry: the candidate policy's held-out metrics on the new data next to production's (the
gate's paired per-task differences, true preference included) and its training means.

    nice python benchmarks/retrain.py --seeds 0 1 2
    nice python benchmarks/retrain.py --seeds 0 --anchors
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: Bench-sized training: the dice preset at a smaller width, one thread, no progress bar.
OVERRIDES = [
    "runtime.threads=1",
    "runtime.device=cpu",
    "train.progress_bar=false",
    "train.checkpoint=false",
    "train.batch_size=1024",
    "train.epochs=60",
    "model.dim=32",
    "train.eval_every_steps=2",  # a fine curve: the time to 99% is read at evaluations
    "train.patience=20",  # 40 steps without a better evaluation, as the preset's 10 x 10
]


def curve(run_dir: Path, monitor: str) -> list[tuple[int, float]]:
    """(step, selection metric) of every evaluation in a run's logs."""
    with open(run_dir / "logs" / "metrics.csv") as f:
        return [(int(r["step"]), float(r[monitor])) for r in csv.DictReader(f) if r.get(monitor)]


def steps_to(points: list[tuple[int, float]], target: float) -> int | None:
    """First step whose value is at or below ``target`` (a loss), None when never."""
    return next((s for s, v in points if v <= target), None)


def drifted_base(seed: int, args: argparse.Namespace, root: Path) -> Any:
    """The world (``root/dir``), its drifted continuation (``root/new``) and the base reward model
    published to ``root/REG``; returns the reward config."""
    from data_pipelines.synth import SynthConfig, write, write_continuation
    from data_pipelines.synth.drift import ContinueConfig
    from parpo.presets import load
    from reward_models.config import RewardConfig
    from reward_models.pipeline import train_and_publish

    world = SynthConfig(n_users=args.users, n_items=args.items, rounds=8, seed=seed)
    drift = ContinueConfig(
        rounds=2, new_users=args.users // 10, new_items=args.new_items, interest_drift=args.drift
    )
    write(world, root / "dir")
    write_continuation(root / "dir", root / "new", drift)
    cfg = load(RewardConfig, "reward", "dice", [*OVERRIDES, f"runtime.seed={seed}"])
    train_and_publish(cfg, root / "dir", root / "REG", root / "base-run", label="dice")
    return cfg


def one_seed(seed: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from parpo.retrain.job import RetrainRequest, retrain
    from reward_models.pipeline import train_and_publish

    cfg = drifted_base(seed, args, root)
    reg = root / "REG"
    t0 = time.perf_counter()
    scratch = train_and_publish(cfg, root / "new", root / "SCRATCH", root / "scratch-run", label="dice")
    scratch_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = retrain(RetrainRequest(registry=reg, data=root / "new"), say=lambda _line: None)
    warm_s = time.perf_counter() - t0
    rec = out.record
    cand = json.loads((reg / "reward" / rec["candidate"]["reward"] / "metrics.json").read_text())
    monitor = scratch.training["selection"]["metric"]
    s_curve = curve(scratch.run_dir, monitor)
    w_curve = curve(reg / "retrain" / rec["key"] / "run", monitor)
    best = min(v for _, v in s_curve)
    target = best / 0.99
    s_steps, w_steps = steps_to(s_curve, target), steps_to(w_curve, target)
    s_rate = scratch.training["train_seconds"] / max(scratch.training["steps"], 1)
    w_rate = cand["training"]["train_seconds"] / max(cand["training"]["steps"], 1)
    fraction = None if w_steps is None else (w_steps * w_rate) / (s_steps * s_rate)
    truth = {
        k: cand["synthetic"][k] - scratch.metrics["synthetic"][k]
        for k in ("interest_spearman", "uniform.ndcg@10")
    }
    eval_rec = json.loads((reg / "retrain" / rec["key"] / "eval.json").read_text())
    new = next(c for c in eval_rec["checks"] if c["set"] == "new" and c["metric"] == "ndcg@10")
    return {
        "bench": "retrain",
        "seed": seed,
        "world": f"{args.users}x{args.items}+{args.users // 10}u+{args.new_items}i drift {args.drift}",
        "status": out.status,
        "selection": monitor,
        "scratch_best": best,
        "steps_to_99pct": {"scratch": s_steps, "warm": w_steps},
        "warm_time_fraction": fraction,
        "warm_quality_delta": truth,
        "truth": {
            "warm": {k: cand["synthetic"][k] for k in truth},
            "scratch": {k: scratch.metrics["synthetic"][k] for k in truth},
        },
        "vs_production_new_ndcg@10": {
            k: new.get(k) for k in ("candidate", "production", "diff", "ci_low", "ci_high")
        },
        "gate_seconds": eval_rec["seconds"],
        "wall_seconds": {
            "scratch_train_and_publish": round(scratch_s, 2),
            "warm_retrain_job": round(warm_s, 2),
        },
    }


POLICY_FAST = [
    "runtime.device=cpu",
    "runtime.threads=1",
    "policy.dim=16",
    "policy.heads=2",
    "policy.layers=1",
    "train.tasks_per_update=32",
    "train.group_size=4",
    "train.progress_bar=false",
]
GATE = """reward:
  - {set: new, metric: ndcg@10, margin: 1.0}
policy:
  - {set: warm, metric: hit@10, margin: 1.0}
  - {set: warm, metric: true_preference, margin: 1.0}
  - {set: warm, metric: task_quality, margin: 1.0}
  - {set: cold, metric: true_preference, margin: 1.0}
"""


def anchor_modes(seed: int, args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    """One line per anchor mode: the candidate policy vs production (see the module docstring)."""
    import shutil

    from parpo.presets import load
    from parpo.retrain.job import RetrainRequest, retrain
    from parpo.trainer.config import PolicyTrainConfig
    from parpo.trainer.pipeline import train_and_publish as policy_train

    drifted_base(seed, args, root)
    pcfg = load(
        PolicyTrainConfig, "policy", "default", [*POLICY_FAST, f"train.updates={2 * args.policy_updates}"]
    )
    policy_train(pcfg, root / "dir", root / "REG", run_dir=root / "policy-run")
    (root / "gate.yaml").write_text(GATE)
    rows = []
    for mode in ("carry", "decay", "reset"):
        reg = root / f"REG-{mode}"
        shutil.copytree(root / "REG", reg)
        req = RetrainRequest(
            registry=reg, data=root / "new", policy=True, anchors=mode,
            policy_updates=args.policy_updates, gate=str(root / "gate.yaml"),
        )  # fmt: skip
        out = retrain(req, say=lambda _line: None)
        checks = json.loads((reg / "retrain" / out.record["key"] / "eval.json").read_text())["checks"]
        policy = [c for c in checks if c["kind"] == "policy"]
        version = reg / "policy" / out.record["candidate"]["policy"]
        training = json.loads((version / "metrics.json").read_text())["training"]
        rows.append(
            {
                "bench": "retrain_anchors",
                "seed": seed,
                "anchors": mode,
                "updates": args.policy_updates,
                "vs_production": {
                    f"{c['set']}/{c['metric']}": {
                        k: c.get(k) for k in ("candidate", "production", "diff", "ci_low", "ci_high")
                    }
                    for c in policy
                },
                "training_last_updates": {
                    k: training[k]
                    for k in ("reward/preference/mean", "report/hit@10", "report/task_quality")
                    if k in training
                },
            }
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--users", type=int, default=1000)
    p.add_argument("--items", type=int, default=600)
    p.add_argument("--new-items", type=int, default=200)
    p.add_argument("--drift", type=float, default=0.3)
    p.add_argument("--anchors", action="store_true", help="also compare the policy anchor modes")
    p.add_argument("--policy-updates", type=int, default=10)
    args = p.parse_args()
    if args.anchors:
        with tempfile.TemporaryDirectory(prefix="parpo-retrain-bench-") as tmp:
            for row in anchor_modes(args.seeds[0], args, Path(tmp)):
                print(json.dumps(row), flush=True)
        return
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix="parpo-retrain-bench-") as tmp:
            row = one_seed(seed, args, Path(tmp))
        print(json.dumps(row), flush=True)
        rows.append(row)
    fractions = [r["warm_time_fraction"] for r in rows]
    print(
        json.dumps(
            {
                "bench": "retrain_summary",
                "seeds": args.seeds,
                "promoted": sum(r["status"] == "promoted" for r in rows),
                "warm_time_fraction_mean": None if None in fractions else statistics.mean(fractions),
                "warm_time_fraction_target": 0.3,
                "warm_quality_delta_mean": {
                    k: statistics.mean(r["warm_quality_delta"][k] for r in rows)
                    for k in rows[0]["warm_quality_delta"]
                },
                "warm_quality_delta_target": -0.005,
                "vs_production_new_ndcg@10_diff_mean": statistics.mean(
                    r["vs_production_new_ndcg@10"]["diff"] for r in rows
                ),
                "gate_seconds_mean": statistics.mean(r["gate_seconds"] for r in rows),
            }
        )
    )


if __name__ == "__main__":
    main()
