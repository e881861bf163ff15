"""Skill graph memory ablation (issue 21, "Quality"): no memory vs ``flat`` vs ``psgm`` at the same
training budget. One JSON line per (world, variant, seed) appended to ``--results``
(``benchmarks/results/memory_ablation.jsonl``); a rerun skips the runs already recorded there
(same world, variant, seed and budget), so the study can run in parts. ``--summarise`` prints the
markdown tables: per world and task set the mean of each variant over seeds and each memory
variant minus no memory, paired by (seed, task), with a percentile bootstrap interval over those
pairs (``parpo.evaluation.compare.paired_differences``).

Variants (only these overrides differ; ``policy.memory_skills`` M = ``memory.k`` = 4):
  none   ``policy.memory_skills=0``: no memory (the trainer builds none)
  flat-pareto  ``policy.memory_skills=4 memory.retriever=flat``: similarity-only recall
  psgm-pareto  ``policy.memory_skills=4 memory.retriever=psgm``: the skill graph's two-step
         retrieval; both with ``memory.high_value_rule=pareto``, the default (a tie with a
         threshold counts at distillation; docs/memory.md)
  flat, psgm   the same under ``memory.high_value_rule=strict``, the first default (their names
         in the results predate the change): a task quality most episodes top out on keeps the
         memory empty or frozen

Worlds (data and a DICE reward model built once per world in ``--workdir`` and reused):
  synthetic  the synthetic default (``parpo data synth``; the headline)
  price      the synthetic world with ``price_preference=1.0`` (docs/synthetic.md: each user
             prefers cheap or premium items, visible in their own clicks and in the true
             interest): a setting built for a per-user memory to matter
  ml100k     MovieLens-100K from ``../shared/data/movielens-100k`` (``--ml100k``; skipped with
             a stated reason when absent)

Budget: the ``default`` policy preset with ``--updates`` x ``--tasks`` (default 30 x 64, the
demo's), ``runtime.seed`` = the seed (initial weights, task draws, sampling). Evaluation: the
trained policy greedy on the warm (test) and cold (cold_test) tasks of the reward version's split
(``EnvSource.tasks``: at most ``env.tasks.max_eval`` each, the same tasks for every variant):
task quality, preference, true preference (synthetic), hit@10, ndcg@10 per task (kept in the line,
for the pairing) and the plan diversity (bits) per task set. The memory's state after the last
update (``memory/*`` of the trainer's metrics: skills, hit rate, communities, ...) is recorded.

    nice -n 10 .venv/bin/python benchmarks/memory_ablation.py --worlds synthetic price --seeds 0
    .venv/bin/python benchmarks/memory_ablation.py --summarise
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.env_baselines import prepare  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "memory_ablation.jsonl"
ML100K = ROOT.parent / "shared" / "data" / "movielens-100k"
WORLDS = ("synthetic", "price", "ml100k")
#: The plan-preference world's generator field, fixed before any ablation run (docs/synthetic.md).
PRICE_PREFERENCE = 1.0
SKILLS = 4
VARIANTS: dict[str, list[str]] = {
    "none": ["policy.memory_skills=0"],
    # The strict rule, the default when these ran first (their lines keep the names): a
    # saturated task quality keeps the memory empty or frozen (benchmarks/README.md).
    "flat": [
        f"policy.memory_skills={SKILLS}",
        f"memory.k={SKILLS}",
        "memory.retriever=flat",
        "memory.high_value_rule=strict",
    ],
    "psgm": [
        f"policy.memory_skills={SKILLS}",
        f"memory.k={SKILLS}",
        "memory.retriever=psgm",
        "memory.high_value_rule=strict",
    ],
    # Ties count at distillation: today's default rule.
    "flat-pareto": [
        f"policy.memory_skills={SKILLS}",
        f"memory.k={SKILLS}",
        "memory.retriever=flat",
        "memory.high_value_rule=pareto",
    ],  # fmt: skip
    "psgm-pareto": [
        f"policy.memory_skills={SKILLS}",
        f"memory.k={SKILLS}",
        "memory.retriever=psgm",
        "memory.high_value_rule=pareto",
    ],  # fmt: skip
}
BASE = "none"
#: Second baselines: a memory variant against the same network with the memory the strict rule
#: leaves empty (what the memory's content adds, apart from the network's extra skill layer).
SAME_NETWORK = {"flat-pareto": "flat", "psgm-pareto": "psgm"}
PARTS = ("warm", "cold")
METRICS = ("task_quality", "preference", "true_preference", "hit@10", "ndcg@10")


def data_for(world: str, work: Path) -> tuple[Path, Path]:
    """(data dir, reward registry) of ``world``, built in ``work`` on first use."""
    if world == "ml100k":
        return prepare("movielens", ML100K, work, 1)
    if world == "price":
        from data_pipelines.synth import SynthConfig

        return prepare("synth-price", None, work, 1, synth=SynthConfig(price_preference=PRICE_PREFERENCE))
    return prepare("synth", None, work, 1)


def run_key(line: dict[str, Any]) -> tuple[str, str, int, int, int]:
    """What makes two runs the same run: world, variant, seed and the budget."""
    b = line["budget"]
    return (line["world"], line["variant"], line["seed"], b["updates"], b["tasks_per_update"])


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The recorded runs of ``path`` (none when it does not exist)."""
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def pending(
    done: Iterable[dict[str, Any]],
    worlds: Sequence[str],
    variants: Sequence[str],
    seeds: Sequence[int],
    updates: int,
    tasks: int,
) -> list[tuple[str, str, int]]:
    """The (world, variant, seed) runs not yet in ``done``, seed-major (an interrupted study still
    has whole seeds: every variant of a seed before the next seed)."""
    have = {run_key(r) for r in done}
    return [
        (w, v, s) for s in seeds for w in worlds for v in variants if (w, v, s, updates, tasks) not in have
    ]


def memory_state(history: Sequence[dict[str, float]]) -> dict[str, float]:
    """The ``memory/*`` metrics of the last update and the mean hit rate over all updates."""
    if not history:
        return {}
    last = {k.removeprefix("memory/"): round(v, 4) for k, v in history[-1].items() if k.startswith("memory/")}
    rates = [m["memory/hit_rate"] for m in history if "memory/hit_rate" in m]
    if rates:
        last["hit_rate_mean"] = round(sum(rates) / len(rates), 4)
    return last


def one_run(world: str, variant: str, seed: int, data: Path, reg: Path, work: Path, updates: int,
            tasks: int) -> dict[str, Any]:  # fmt: skip
    """Train one variant at the budget, evaluate it greedily; the JSON line."""
    from parpo.env import EnvSource
    from parpo.env.evaluate import run_episodes, summarise
    from parpo.policy.agent import PolicyAgent
    from parpo.presets import load
    from parpo.trainer.config import PolicyTrainConfig
    from parpo.trainer.loop import PolicyTrainer

    over = [
        f"train.updates={updates}",
        f"train.tasks_per_update={tasks}",
        f"runtime.seed={seed}",
        "runtime.threads=1",
        "runtime.device=cpu",
        "train.progress_bar=false",
        *VARIANTS[variant],
    ]
    cfg = load(PolicyTrainConfig, "policy", "default", over)
    src = EnvSource.load(data, reg, cfg=cfg.env)
    t0 = time.perf_counter()
    res = PolicyTrainer(cfg, src, work / "runs" / f"{world}-{variant}-s{seed}-{updates}x{tasks}").fit()
    line: dict[str, Any] = {
        "bench": "memory_ablation",
        "world": world,
        "variant": variant,
        "overrides": VARIANTS[variant],
        "seed": seed,
        "budget": {
            "updates": updates,
            "tasks_per_update": tasks,
            "group_size": cfg.train.group_size,
            "rollouts": updates * tasks * cfg.train.group_size,
        },
        "train_seconds": round(time.perf_counter() - t0, 1),
        "memory": memory_state(res.history),
    }
    env, agent = src.env(), PolicyAgent(res.policy, greedy=True)
    for part in PARTS:
        per_task = run_episodes(env, agent, src.tasks(part))
        s = summarise(per_task)
        ms = [m for m in METRICS if m in per_task.columns]
        line[part] = {m: round(s[m], 4) for m in ms} | {
            "n_tasks": s["n_tasks"],
            "plan_diversity": round(s["plan_diversity"], 4),
            "distinct_plans": per_task["plan"].n_unique() if per_task.height else 0,
            "tasks": {"task_id": per_task["task_id"].to_list()}
            | {m: [round(float(x), 5) for x in per_task[m]] for m in ms},
        }
    return line


def paired(lines: Sequence[dict[str, Any]], world: str, variant: str, n_boot: int = 1000,
           seed: int = 0, base: str = BASE) -> dict[str, Any]:  # fmt: skip
    """``variant`` minus ``base`` (no memory) on ``world``: per task set and metric the mean
    difference over the (seed, task) pairs both have, its percentile 95% bootstrap interval and the
    pairs' count (``paired_differences``' keys). Seeds missing either side are left out."""
    import polars as pl

    from parpo.evaluation.compare import paired_differences

    def frame(v: str) -> pl.DataFrame:
        rows = []
        for r in lines:
            if r["world"] != world or r["variant"] != v:
                continue
            for part in PARTS:
                t = r[part]["tasks"]
                rows.append(
                    pl.DataFrame(t).with_columns(
                        pl.lit(part).alias("part"),
                        (pl.lit(f"s{r['seed']}/") + pl.col("task_id")).alias("task_id"),
                    )
                )
        return pl.concat(rows, how="diagonal_relaxed") if rows else pl.DataFrame()

    a, b = frame(variant), frame(base)
    if a.height == 0 or b.height == 0:
        return {part: {"n_pairs": 0} for part in PARTS}
    return paired_differences(a, b, n_boot=n_boot, seed=seed)


def summarise_results(lines: Sequence[dict[str, Any]]) -> str:
    """Markdown: per world and task set, each variant's means (± sd over seeds) and the paired
    differences against no memory; then the memory's state after training."""
    out = []
    budgets = sorted({(r["budget"]["updates"], r["budget"]["tasks_per_update"]) for r in lines})
    for world, budget in ((w, b) for b in budgets for w in WORLDS):
        here = [r for r in lines if r["world"] == world and run_key(r)[3:] == budget]
        if not here:
            continue
        b = here[0]["budget"]
        seeds = sorted({r["seed"] for r in here})
        out.append(
            f"\n### {world} ({b['updates']} updates x {b['tasks_per_update']} tasks x G = {b['group_size']}, "
            f"{b['rollouts']} rollouts; seeds {seeds})\n"
        )
        diffs = {(v, BASE): paired(here, world, v) for v in VARIANTS if v != BASE}
        diffs |= {(v, b): paired(here, world, v, base=b) for v, b in SAME_NETWORK.items()}
        for part in PARTS:
            ms = [m for m in METRICS if m in here[0][part]]
            n = here[0][part]["n_tasks"]
            out.append(f"{part} ({n} tasks) | " + " | ".join([*ms, "plan_diversity"]))
            out.append("|".join(["---"] * (len(ms) + 2)))
            for v in VARIANTS:
                runs = [r for r in here if r["variant"] == v]
                if runs:
                    cells = [_ms([r[part][m] for r in runs]) for m in [*ms, "plan_diversity"]]
                    out.append(f"{v} ({len(runs)} seeds) | " + " | ".join(cells))
            for (v, base), d in diffs.items():
                sec = d[part]
                if sec["n_pairs"]:
                    cells = [
                        f"{sec[m]['diff']:+.4f} [{sec[m]['ci_low']:+.4f}, {sec[m]['ci_high']:+.4f}]"
                        for m in ms
                    ]
                    out.append(f"{v} − {base} ({sec['n_pairs']} pairs) | " + " | ".join([*cells, ""]))
            out.append("")
        mem = [r for r in here if r["memory"]]
        if mem:
            keys = ("skills", "hit_rate", "hit_rate_mean", "communities_coarse", "communities_fine", "users",
                    "merged", "evicted")  # fmt: skip
            out.append("memory after training | " + " | ".join(keys))
            out.append("|".join(["---"] * (len(keys) + 1)))
            for r in mem:
                cells = [str(r["memory"].get(k, "—")) for k in keys]
                out.append(f"{r['variant']} s{r['seed']} | " + " | ".join(cells))
            out.append("")
        secs = [r["train_seconds"] for r in here]
        out.append(f"train seconds per run: median {statistics.median(secs):.0f} (min {min(secs):.0f}, "
                   f"max {max(secs):.0f})")  # fmt: skip
    return "\n".join(out)


def _ms(xs: list[float]) -> str:
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.4f} ± {sd:.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--worlds", nargs="*", default=["synthetic", "price"], choices=[w for w in WORLDS if w != "ml100k"]
    )
    ap.add_argument(
        "--ml100k", action="store_true", help="also MovieLens-100K (../shared/data/movielens-100k)"
    )
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--tasks", type=int, default=64, help="train.tasks_per_update")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/memory-ablation"))
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--summarise", action="store_true", help="print the markdown tables of --results")
    args = ap.parse_args()
    if args.summarise:
        print(summarise_results(read_lines(args.results)))
        return
    worlds = list(args.worlds)
    if args.ml100k:
        if (ML100K / "u.data").is_file():
            worlds.append("ml100k")
        else:
            print(json.dumps({"bench": "memory_ablation", "skipped": "ml100k",
                              "reason": f"{ML100K}/u.data not found (see ../shared/data/README)"}), flush=True)  # fmt: skip
    import torch

    torch.set_num_threads(1)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    todo = pending(
        read_lines(args.results), worlds, args.variants, range(args.seeds), args.updates, args.tasks
    )
    for world, variant, seed in todo:
        data, reg = data_for(world, args.workdir)
        line = one_run(world, variant, seed, data, reg, args.workdir, args.updates, args.tasks)
        with args.results.open("a") as f:
            f.write(json.dumps(line) + "\n")
        print(json.dumps({k: v for k, v in line.items() if k not in PARTS}
                         | {p: {m: line[p][m] for m in METRICS if m in line[p]} for p in PARTS}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
