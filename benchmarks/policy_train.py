"""Policy training speed: environment steps/s of rollouts and PPO update throughput, next to the
environment's own cost in the same run, and the wall time of the demo's policy training.

Per dataset, one JSON line with: ``env_floor_steps_per_s`` (the popularity agent through the
same batched environment on the same tasks x G: what the environment alone costs),
``rollout_steps_per_s`` (the native policy sampling through it: policy + environment),
``ratio_rollout_to_env_floor``, ``update_samples_per_s`` (step samples through the PPO epochs,
forward + backward + optimiser), medians over the updates after the first; and
``train_seconds`` for the whole run (``--updates`` updates of the default preset: the demo's
policy training), ``loadavg`` at the end (the machines are shared: read ratios, not seconds).

    .venv/bin/python benchmarks/policy_train.py --synth --workdir /tmp/pt
    .venv/bin/python benchmarks/policy_train.py --data DIR --registry REG --updates 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.env_baselines import prepare  # noqa: E402


def bench(name: str, data: Path, reg: Path, updates: int, overrides: list[str], work: Path) -> dict:
    import torch

    from parpo.env import EnvSource
    from parpo.env.baselines import popularity_agent
    from parpo.env.evaluate import run_episodes
    from parpo.presets import load
    from parpo.trainer.config import PolicyTrainConfig
    from parpo.trainer.loop import PolicyTrainer

    cfg = load(
        PolicyTrainConfig,
        "policy",
        "default",
        [f"train.updates={updates}", "train.progress_bar=false", *overrides],
    )
    src = EnvSource.load(data, reg, cfg=cfg.env)
    t = cfg.train
    tasks = src.tasks("train")[: t.tasks_per_update]
    episodes = [x for x in tasks for _ in range(t.group_size)]
    env = src.env()
    run_episodes(env, popularity_agent(), episodes)  # warm the reward cache like training would
    t0 = time.perf_counter()
    per_task = run_episodes(env, popularity_agent(), episodes)
    floor = float(per_task["steps"].sum()) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    res = PolicyTrainer(cfg, src, work / f"{name}-run").fit()
    total = time.perf_counter() - t0
    rest = res.history[1:] or res.history
    steps = statistics.median(m["throughput/env_steps_per_s"] for m in rest)
    samples = [m["throughput/env_steps_per_s"] * m["time/rollout_s"] for m in rest]
    upd = statistics.median(s * t.ppo_epochs / m["time/update_s"] for s, m in zip(samples, rest, strict=True))
    last = res.history[-1]
    return {
        "bench": "policy_train",
        "data": name,
        "model": "native",
        "algo": cfg.advantage.estimator,
        "threads": torch.get_num_threads(),
        "updates": updates,
        "tasks_per_update": t.tasks_per_update,
        "group_size": t.group_size,
        "env_floor_steps_per_s": round(floor, 1),
        "rollout_steps_per_s": round(steps, 1),
        "ratio_rollout_to_env_floor": round(steps / floor, 3),
        "update_samples_per_s": round(upd, 1),
        "train_seconds": round(total, 1),
        "final_preference": round(last.get("reward/preference/mean", 0.0), 4),
        "final_task_quality": round(last.get("report/task_quality", 0.0), 4),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--synth", action="store_true", help="the synthetic default (parpo data synth defaults)")
    ap.add_argument("--movielens", type=Path, help="the raw ML-100K folder (ingested into the workdir)")
    ap.add_argument("--data", type=Path, help="an ingested dataset folder (with --registry)")
    ap.add_argument("--registry", type=Path, help="a registry holding a reward version for --data")
    ap.add_argument("--workdir", type=Path, help="keep data and reward models here (default: a temp folder)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (runtime.threads)")
    ap.add_argument("--updates", type=int, default=60, help="policy updates (the default preset's: the demo)")
    ap.add_argument("overrides", nargs="*", help="policy config overrides, e.g. train.group_size=2")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="policy-train-"))
    over = [f"runtime.threads={args.threads}", *args.overrides]
    jobs = []
    if args.data is not None:
        jobs.append(("custom", args.data, args.registry))
    if args.synth:
        jobs.append(("synthetic", *prepare("synth", None, work, args.threads)))
    if args.movielens is not None:
        jobs.append(("ml-100k", *prepare("movielens", args.movielens, work, args.threads)))
    for name, data, reg in jobs:
        print(json.dumps(bench(name, data, reg, args.updates, over, work)), flush=True)


if __name__ == "__main__":
    main()
