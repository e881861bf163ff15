"""The personal signal's effect on true preference (issue 17): policies trained with
``policy.personal_features`` on and off, side by side with popularity, ``greedy_reward`` and
``oracle_true`` in the same evaluation, on a dataset whose truth is known.

One JSON line per (seed, personal, part): the agents' mean true preference, the policy's paired
difference to popularity (mean and 95% percentile bootstrap interval over the evaluated tasks),
its share of the oracle's margin over popularity, and task quality.

    .venv/bin/parpo demo -o /tmp/demo   # data + reward model at the demo's settings
    .venv/bin/python benchmarks/personal_signal.py --data /tmp/demo/data \\
        --registry /tmp/demo/registry --seeds 0 1 --updates 30 --tasks 64
    # data without a truth (MovieLens-100K): hit@10 against popularity, the feature on only
    .venv/bin/python benchmarks/personal_signal.py --data /tmp/ml --registry /tmp/ml-reg \
        --metric hit@10 --personal on --updates 60 --tasks 128
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def paired(
    per_task: pl.DataFrame, part: str, a: str, b: str, metric: str = "true_preference", n_boot: int = 2000
) -> tuple[float, float, float]:
    """Mean of ``a - b`` on ``metric`` over the part's tasks and its 95% bootstrap interval."""
    rows = per_task.filter(pl.col("part") == part)
    wide = rows.filter(pl.col("agent") == a).join(
        rows.filter(pl.col("agent") == b), on="task_id", suffix="_b"
    )
    d = (wide[metric] - wide[f"{metric}_b"]).to_numpy()
    rng = np.random.default_rng(0)
    boots = d[rng.integers(0, d.size, (n_boot, d.size))].mean(1)
    return float(d.mean()), float(np.quantile(boots, 0.025)), float(np.quantile(boots, 0.975))


def run(
    data: Path,
    registry: Path,
    seed: int,
    personal: bool,
    updates: int,
    tasks: int,
    work: Path,
    metric: str = "true_preference",
) -> list[dict]:
    from parpo.evaluation.policy_eval import evaluate_policy, read_tasks
    from parpo.presets import load
    from parpo.trainer.config import PolicyTrainConfig
    from parpo.trainer.pipeline import train_and_publish

    cfg = load(
        PolicyTrainConfig,
        "policy",
        "default",
        [
            f"train.updates={updates}",
            f"train.tasks_per_update={tasks}",
            "train.progress_bar=false",
            f"runtime.seed={seed}",
            f"policy.personal_features={str(personal).lower()}",
        ],
    )
    t0 = time.perf_counter()
    out = train_and_publish(cfg, data, registry, run_dir=work / f"s{seed}-p{int(personal)}", preset="default")
    train_s = time.perf_counter() - t0
    path, res = evaluate_policy(registry, data, out.version.name)
    per_task = read_tasks(path)
    lines = []
    for part in ("warm", "cold"):
        sec = res[part]
        tp = {"policy": sec["policy"][metric]} | {k: v[metric] for k, v in sec["baselines"].items()}
        diff = paired(per_task, part, "policy", "popularity", metric)
        margin = tp["oracle_true"] - tp["popularity"] if "oracle_true" in tp else None
        lines.append(
            {
                "seed": seed,
                "personal_features": personal,
                "part": part,
                "n_tasks": sec["n_tasks"],
                metric: {k: round(v, 4) for k, v in tp.items()},
                "policy_minus_popularity": [round(x, 4) for x in diff],
                "share_of_oracle_margin": round((tp["policy"] - tp["popularity"]) / margin, 4)
                if margin
                else None,
                "task_quality": round(sec["policy"]["task_quality"], 4),
                "train_seconds": round(train_s, 1),
                "policy_version": out.version.name,
            }
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--registry", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--tasks", type=int, default=64)
    ap.add_argument(
        "--metric", default="true_preference", help="per-task metric compared (hit@10 without a truth)"
    )
    ap.add_argument("--personal", choices=("both", "on", "off"), default="both")
    ap.add_argument(
        "--forward",
        nargs="+",
        metavar="VERSION",
        help="only time serving's forward_ms (benchmarks/serve_load.py) of these policy versions, in turn",
    )
    a = ap.parse_args()
    if a.forward:
        from benchmarks.serve_load import forward_ms
        from parpo.policy.bundle import PolicyBundle

        for v in a.forward:
            bundle = PolicyBundle.load(a.registry, v)
            users = list(bundle.reward_model.user_index)[:1000]
            ms = forward_ms(a.registry, users, 10, version=v)
            personal = bundle.policy.net.cfg.personal_features
            print(
                json.dumps(
                    {"what": "forward", "policy_version": v, "personal_features": personal, "forward_ms": ms}
                )
            )
        return
    with tempfile.TemporaryDirectory() as tmp:
        for seed in a.seeds:
            for personal in {"both": (False, True), "on": (True,), "off": (False,)}[a.personal]:
                for line in run(a.data, a.registry, seed, personal, a.updates, a.tasks, Path(tmp), a.metric):
                    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
