"""Environment baselines: the bar a learned policy must clear, and environment speed.

For each dataset: train and publish a DICE reward model (``dice`` preset, its default split),
open the environment on that version's split, select the best fixed plan on training tasks,
then run the four baselines on the warm (test) and cold (cold_test) tasks. One JSON line per
(data, agent, task set) with hit@10, ndcg@10, task_quality, preference, true_preference
(synthetic), plan_diversity; one line per dataset with the fixed-plan selection; one speed
line: episodes/s of the batched environment against the same episodes one at a time
(``Environment``, the reference), median of ``--repeats``, fresh reward cache each repeat.

    .venv/bin/python benchmarks/env_baselines.py --synth --movielens ../shared/data/movielens-100k
    .venv/bin/python benchmarks/env_baselines.py --data DIR --registry REG   # an existing version
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def prepare(kind: str, path: Path | None, work: Path, threads: int, synth: Any = None) -> tuple[Path, Path]:
    """(data dir, registry) for ``synth`` (the ``parpo data synth`` defaults, or the ``SynthConfig``
    ``synth``; give such a world a ``kind`` of its own) or ``movielens``."""
    from parpo.presets import load
    from reward_models.config import RewardConfig
    from reward_models.pipeline import train_and_publish

    data, reg = work / kind / "data", work / kind / "REG"
    if not (data / "manifest.json").is_file():
        if kind == "synth" or synth is not None:
            from data_pipelines.synth import SynthConfig, write

            write(synth or SynthConfig(), data)
        else:
            from data_pipelines.adapters import open_source
            from data_pipelines.ingest import ingest

            ingest(open_source("movielens", path, None), data)
    if not reg.exists():
        over = [f"runtime.threads={threads}", "train.progress_bar=false", "train.checkpoint=false"]
        train_and_publish(
            load(RewardConfig, "reward", "dice", over), data, reg, work / kind / "run", label="dice"
        )
    return data, reg


def speed(src: Any, tasks: list, repeats: int, single_n: int) -> dict[str, Any]:
    """Episodes/s of the popularity agent: batched vs one ``Environment`` episode at a time."""
    from parpo.env import Environment
    from parpo.env.baselines import popularity_agent
    from parpo.env.evaluate import run_episodes

    agent = popularity_agent()
    batched, single = [], []
    for _ in range(repeats):
        env = src.env()  # fresh reward cache
        t0 = time.perf_counter()
        run_episodes(env, agent, tasks)
        batched.append(len(tasks) / (time.perf_counter() - t0))
        one = Environment(src.catalogue, src.reward_model, src.cfg)
        t0 = time.perf_counter()
        for t in tasks[:single_n]:
            obs, done = one.reset(t), False
            while not done:
                obs, _, term, trunc, _ = one.step(agent.act([obs])[0])
                done = term or trunc
        single.append(single_n / (time.perf_counter() - t0))
    b, s = statistics.median(batched), statistics.median(single)
    return {
        "ours_episodes_per_s": round(b, 1),
        "reference_episodes_per_s": round(s, 1),
        "speedup_vs_reference": round(b / s, 2),
        "episodes": len(tasks),
        "reference_episodes": single_n,
        "repeats": repeats,
        "runs_episodes_per_s": {
            "ours": [round(x, 1) for x in batched],
            "reference": [round(x, 1) for x in single],
        },
    }


def bench(name: str, data: Path, reg: Path, repeats: int, train_limit: int) -> None:
    from parpo.env import EnvSource
    from parpo.env.baselines import GreedyRewardAgent, RandomAgent, popularity_agent
    from parpo.env.evaluate import run_episodes, select_fixed_plan, summarise

    src = EnvSource.load(data, reg)
    env = src.env()
    train = src.tasks("train")
    t0 = time.perf_counter()
    fixed, scores = select_fixed_plan(env, train[:train_limit], src.cfg.search_k)
    print(
        json.dumps(
            {
                "bench": "env_fixed_plan",
                "data": name,
                "reward_version": src.reward_version,
                "train_tasks": min(len(train), train_limit),
                "chosen": fixed.plan.label,
                "plans": [
                    {k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()} for s in scores
                ],
                "seconds": round(time.perf_counter() - t0, 2),
            }
        ),
        flush=True,
    )
    agents = [
        RandomAgent(src.cfg.search_k, src.cfg.seed),
        popularity_agent(),
        fixed,
        GreedyRewardAgent(src.reward_model),
    ]
    for which in ("warm", "cold"):
        tasks = src.tasks(which)
        for a in agents:
            t0 = time.perf_counter()
            s = summarise(run_episodes(env, a, tasks))
            line = {
                "bench": "env_baselines",
                "data": name,
                "split": src.split.meta["name"],
                "tasks": which,
                "agent": a.name,
            }
            line |= {k: round(v, 4) if isinstance(v, float) else v for k, v in s.items()}
            line["oracle"] = a.name == "greedy_reward"
            line["seconds"] = round(time.perf_counter() - t0, 3)
            print(json.dumps(line), flush=True)
    print(
        json.dumps({"bench": "env_speed", "data": name, **speed(src, train[:4096], repeats, 300)}), flush=True
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--synth", action="store_true", help="the synthetic default (parpo data synth defaults)")
    ap.add_argument("--movielens", type=Path, help="the raw ML-100K folder (ingested into the workdir)")
    ap.add_argument("--data", type=Path, help="an ingested dataset folder (with --registry)")
    ap.add_argument("--registry", type=Path, help="a registry holding a reward version for --data")
    ap.add_argument("--workdir", type=Path, help="keep data and reward models here (default: a temp folder)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--train-tasks", type=int, default=2000, help="training tasks the fixed plan is chosen on"
    )
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    tmp = None
    work = args.workdir
    if work is None:
        tmp = tempfile.TemporaryDirectory(prefix="env-baselines-")
        work = Path(tmp.name)
    runs: list[tuple[str, Path, Path]] = []
    if args.data is not None:
        if args.registry is None:
            ap.error("--data needs --registry")
        runs.append((args.data.name, args.data, args.registry))
    if args.synth:
        runs.append(("synthetic", *prepare("synth", None, work, args.threads)))
    if args.movielens is not None:
        runs.append(("movielens-100k", *prepare("movielens", args.movielens, work, args.threads)))
    if not runs:
        ap.error("name at least one dataset: --synth, --movielens or --data/--registry")
    for name, data, reg in runs:
        print(f"{name} ...", file=sys.stderr, flush=True)
        bench(name, data, reg, args.repeats, args.train_tasks)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
