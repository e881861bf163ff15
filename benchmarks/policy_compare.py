"""PARPO vs GDPO vs GRPO at an equal budget (issue 7): one setting per invocation, one JSON line
per (algorithm, seed) appended to ``benchmarks/results/policy_compare.jsonl``; ``--summarise``
prints the markdown table (mean ± std over seeds, paired-by-seed PARPO − GDPO / − GRPO).

Budget (every algorithm, every setting): the ``default`` policy preset with
``train.updates=16``, ``train.tasks_per_update=64`` at G = 8 (512 rollouts per update, 8,192
in all, 2 PPO epochs x 4 minibatches = 128 optimiser steps); at G = 2 the same rollouts and
steps (``tasks_per_update=256``). Only ``advantage.estimator`` differs between algorithms; the
seed (``runtime.seed``) sets the initial weights, task draws and sampling.

Study v2 (issue 17, ``--study 2``; ``benchmarks/policy_compare_v2.sh`` runs it in order): the
preset's own budget (``default``: 60 updates x 128 tasks at G = 8, 61,440 rollouts), lines with
``"study": 2`` in ``policy_compare_v2.jsonl`` that also keep per-task values (``per_task``: task
ids, ``TASK_METRICS`` and the user group, warm and cold) and anchor coverage over the last 10
updates; ``--summarise --study 2`` pairs them by (seed, task) with bootstrap intervals and wins
per seed (``summarise_v2``). Study 1's lines, file and tables are unchanged.

Issue 23's options (``--algos gae turn_gae sao pact shaped``, each run from its own preset with the
same budget overrides; ``sao`` at G = 1 with 512 tasks per update, so the same rollouts) are
reported next to PARPO as ``option − parpo`` paired by seed, with rollout throughput
(``samples_per_s``: median env steps per second of rollout time) and rollouts per second of the
whole run (``rollouts_per_s``, critic and updates included).

Settings (data and reward model built once per dataset in ``--workdir`` and reused):
  synthetic-g8, synthetic-g2  the synthetic default (``parpo data synth``), G = 8 / 2
  hetero   synthetic, G = 8: preference -> a_u * preference + N(0, 0.1^2), a_u in {0.1, 1, 10}
           by a hash of the user id (``parpo.env.transforms.HeteroScale``); breakdown per a_u
  drift    synthetic, G = 8: after updates/2 updates, half the users (hash-stable) get
           preference - 0.3 (``LevelDrift``; its step is the number of completed updates, set
           at every training reset: the trainer resets once per update); breakdown drifted / steady
  ml100k   ML-100K (first genre as category), G = 8
  amazon   Amazon Beauty 5-core (attribute-id constraints, order-based split), G = 8
  hetero-pool  hetero at G = 2 with recurring users: training tasks come from a pool of 64
           users (hash-stable, those with held-out tasks), so each user is drawn ~4 times per
           update and their anchors are in use after ``n_min`` updates (in the other settings
           users rarely recur within 16 updates: ``frac_anchored`` is 0-3%). Evaluated on up to
           8 warm tasks per pool user (``env.tasks.per_user_eval=8``), cold tasks as usual, and
           (greedy) on the pool's 256 training tasks, part ``train``

Evaluation: the trained policy acts greedily on the warm (test) and cold tasks of the reward
version's split, in the *untransformed* environment: ``preference`` is the reward model's own
score of the slate (the transforms are nuisances of the training signal, not what the user
gets), ``true_preference`` the synthetic ground truth. The transformed training reward is in
the learning curves (``reward/preference/mean`` of the run's ``logs/metrics.csv``).

    .venv/bin/python benchmarks/policy_compare.py --setting synthetic-g8 --workdir /tmp/pc
    .venv/bin/python benchmarks/policy_compare.py --summarise
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collections.abc import Sequence  # noqa: E402

from benchmarks.env_baselines import prepare  # noqa: E402
from parpo.env import BatchEnv, EnvSource, Observation, PreferenceTransform, Task  # noqa: E402
from parpo.env.transforms import HeteroScale, LevelDrift  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "policy_compare.jsonl"
RESULTS_V2 = ROOT / "benchmarks" / "results" / "policy_compare_v2.jsonl"
SHARED = ROOT.parent / "shared" / "data"  # the real datasets, read in place
ALGOS = ("parpo", "gdpo", "grpo")
#: Issue 23's options, each its own ``policy`` preset (value-based estimators with a critic, and
#: PARPO with shaping penalties); ``sao`` runs one rollout per task (G = 1, the same rollouts).
OPTIONS = ("gae", "turn_gae", "sao", "pact", "shaped")
G1_OPTIONS = ("sao",)
SETTINGS = ("synthetic-g8", "synthetic-g2", "hetero", "drift", "ml100k", "amazon", "hetero-pool")
G2_SETTINGS = ("synthetic-g2", "hetero-pool")
POOL_USERS = 64
METRICS = ("task_quality", "preference", "true_preference", "hit@10", "ndcg@10")
UPDATES, TASKS_G8 = 16, 64
ROLLOUTS_PER_UPDATE = TASKS_G8 * 8
#: Study v2 keeps these per task (warm and cold, in the tasks' order) for the paired bootstrap.
TASK_METRICS = ("true_preference", "preference", "task_quality", "hit@10")
DRIFT_SHIFT = -0.3
HETERO_SIGMA = 0.1


def data_for(setting: str, work: Path) -> tuple[Path, Path]:
    if setting == "ml100k":
        return prepare("movielens", SHARED / "movielens-100k", work, 1)
    if setting == "amazon":
        data = work / "amazon" / "data"
        if not (data / "manifest.json").is_file():  # prepare() ingests MovieLens only
            from data_pipelines.adapters import open_source
            from data_pipelines.ingest import ingest

            ingest(open_source("amazon-s3rec", SHARED / "amazon-beauty-5core-s3rec"), data)
        return prepare("amazon", None, work, 1)
    return prepare("synth", None, work, 1)


def budget_overrides(study: int, algo: str, setting: str) -> list[str]:
    """The budget of a run: study 1 the fixed 16 x 64 (G = 8) of issue 7; study 2 the preset's own
    ``train.updates`` and ``train.tasks_per_update`` at G = 8 (at G = 2 / 1 the same rollouts)."""
    g = 1 if algo in G1_OPTIONS else 2 if setting in G2_SETTINGS else 8
    if study == 1:
        return [f"train.updates={UPDATES}", f"train.tasks_per_update={ROLLOUTS_PER_UPDATE // g}",
                f"train.group_size={g}"]  # fmt: skip
    from parpo.presets import load
    from parpo.trainer.config import PolicyTrainConfig

    preset = load(PolicyTrainConfig, "policy", algo if algo in OPTIONS else "default", []).train
    return [
        f"train.tasks_per_update={preset.tasks_per_update * preset.group_size // g}",
        f"train.group_size={g}",
    ]


def one_run(
    setting: str,
    algo: str,
    seed: int,
    data: Path,
    reg: Path,
    work: Path,
    variant: tuple[str, list[str]] | None = None,
    study: int = 1,
) -> dict[str, Any]:
    """One (setting, algorithm, seed) run; ``variant`` = (tag, extra KEY=VALUE overrides) for
    ablations; ``study`` 2 runs the preset's budget and keeps per-task values (``per_task``)."""
    import polars as pl

    from parpo.env.evaluate import run_episodes, summarise
    from parpo.policy.agent import PolicyAgent
    from parpo.presets import load
    from parpo.trainer.config import PolicyTrainConfig
    from parpo.trainer.loop import PolicyTrainer

    over = [
        *budget_overrides(study, algo, setting),
        *([] if algo in OPTIONS else [f"advantage.estimator={algo}"]),
        f"runtime.seed={seed}",
        "runtime.threads=1",
        "runtime.device=cpu",
        "train.progress_bar=false",
    ]
    if setting == "hetero-pool":
        over += ["env.tasks.per_user_eval=8", "env.tasks.max_eval=100000"]
    over += variant[1] if variant else []
    cfg = load(PolicyTrainConfig, "policy", algo if algo in OPTIONS else "default", over)
    g, updates = cfg.train.group_size, cfg.train.updates  # a variant may override them
    src = EnvSource.load(data, reg, cfg=cfg.env)
    transform: Any = None
    group_of: Any = None  # user id -> breakdown label
    if setting.startswith("hetero"):
        transform = HeteroScale(sigma=HETERO_SIGMA, seed=seed)
        group_of = lambda u: {0.1: "a0.1", 1.0: "a1", 10.0: "a10"}[transform.scale(u)]  # noqa: E731
    elif setting == "drift":
        transform = LevelDrift(at=updates // 2, shift=DRIFT_SHIFT, seed=seed)
        group_of = lambda u: "drifted" if transform.drifts(u) else "steady"  # noqa: E731
        src = _DriftSource(**{f.name: getattr(src, f.name) for f in fields(src)}, drift=transform)
    if setting == "hetero-pool":
        src = _PoolSource(**{f.name: getattr(src, f.name) for f in fields(src)}, pool=_pool(src, POOL_USERS))
    run = (
        work
        / "runs"
        / f"{'v2-' if study == 2 else ''}{setting}-{algo}{'-' + variant[0] if variant else ''}-s{seed}"
    )
    t0 = time.perf_counter()
    res = PolicyTrainer(cfg, src, run, preference_transform=transform).fit()
    train_s = time.perf_counter() - t0
    hist = res.history
    line: dict[str, Any] = {
        "bench": "policy_compare",
        **({"study": study} if study != 1 else {}),
        "algo": algo,
        **({"variant": variant[0], "overrides": variant[1]} if variant else {}),
        "setting": setting,
        "G": g,
        "seed": seed,
        "budget": {
            "updates": updates,
            "tasks_per_update": cfg.train.tasks_per_update,
            "rollouts": updates * cfg.train.tasks_per_update * g,
            "ppo_epochs": cfg.train.ppo_epochs,
            "minibatches": cfg.train.minibatches,
        },
        "train_seconds": round(train_s, 1),
        # rollout throughput (env steps per second of rollout time) and whole-run rollouts per second
        "samples_per_s": round(statistics.median(m["throughput/env_steps_per_s"] for m in hist), 1),
        "rollouts_per_s": round(updates * cfg.train.tasks_per_update * g / train_s, 1),
        "curves_csv": str(res.logs),
    }
    # Training curves (the transformed reward where there is a transform) at 25/50/75/100 %.
    marks = [max(1, round(updates * q)) for q in (0.25, 0.5, 0.75, 1.0)]
    for key, name in (
        ("reward/preference/mean", "preference"),
        ("report/task_quality", "task_quality"),
        ("report/true_preference", "true_preference"),
    ):
        if key in hist[-1]:
            line[f"curve_{name}"] = [round(hist[m - 1][key], 4) for m in marks]
    anchored = [m["preference/frac_anchored"] for m in hist if "preference/frac_anchored" in m]
    if anchored:  # how much of the preference track the user anchors actually set (parpo only)
        line["frac_anchored"] = {
            "mean": round(sum(anchored) / len(anchored), 4),
            "last": round(anchored[-1], 4),
            **({"last10": round(statistics.mean(anchored[-10:]), 4)} if study == 2 else {}),
        }
        for key in ("baseline", "scale"):  # where the anchor's term, not the group's, set b / s
            got = [m[f"preference/frac_anchor_{key}"] for m in hist if f"preference/frac_anchor_{key}" in m]
            if study == 2 and got:
                line[f"frac_anchor_{key}"] = {"mean": round(statistics.mean(got), 4),
                                              "last10": round(statistics.mean(got[-10:]), 4)}  # fmt: skip
    env = EnvSource.env(src)  # the plain environment: no transform, no drift counter
    agent = PolicyAgent(res.policy, greedy=True)
    # hetero-pool also reports the pool's own training tasks (greedy): what the anchors optimise.
    for part in ("warm", "cold", *(("train",) if setting == "hetero-pool" else ())):
        per_task = run_episodes(env, agent, src.tasks(part))
        s = summarise(per_task)
        line[part] = {m: round(s[m], 4) for m in METRICS if m in s} | {"n_tasks": s["n_tasks"]}
        if study == 2:  # the tasks' order is the source's, the same for every run of a setting
            line.setdefault("per_task", {})[part] = {
                "task_id": per_task["task_id"].to_list(),
                **{
                    m: [round(x, 4) for x in per_task[m].to_list()]
                    for m in TASK_METRICS
                    if m in per_task.columns
                },
                **({"group": [group_of(u) for u in per_task["user_id"]]} if group_of is not None else {}),
            }
        if group_of is not None and per_task.height:
            labelled = per_task.with_columns(
                pl.col("user_id").map_elements(group_of, return_dtype=pl.String).alias("grp")
            )
            for (label,), sub in labelled.group_by("grp"):
                s = summarise(sub)
                line[part][label] = {m: round(s[m], 4) for m in METRICS if m in s} | {"n_tasks": s["n_tasks"]}
    for m in METRICS:  # the issue's flat keys: the warm tasks
        if m in line["warm"]:
            line[m] = line["warm"][m]
    return line


class _StepEnv(BatchEnv):
    """Sets the drift's step to the updates completed: the trainer resets once per update."""

    drift: LevelDrift
    resets = 0

    def reset(self, tasks: Sequence[Task]) -> list[Observation]:
        self.drift.step, self.resets = self.resets, self.resets + 1
        return super().reset(tasks)


@dataclass
class _PoolSource(EnvSource):
    """Training and warm tasks of the ``pool`` users only (cold tasks are other users anyway)."""

    pool: frozenset[str] = frozenset()

    def tasks(self, which: str) -> list[Task]:
        tasks = super().tasks(which)
        return tasks if which == "cold" else [t for t in tasks if t.user_id in self.pool]


def _pool(src: EnvSource, n: int) -> frozenset[str]:
    """``n`` users with both training and warm tasks, chosen by a hash of their id (stable)."""
    import hashlib

    both = {t.user_id for t in src.tasks("train")} & {t.user_id for t in src.tasks("warm")}
    return frozenset(sorted(both, key=lambda u: hashlib.sha256(u.encode()).hexdigest())[:n])


@dataclass
class _DriftSource(EnvSource):
    drift: LevelDrift | None = None

    def env(self, preference_transform: PreferenceTransform | None = None) -> BatchEnv:
        e = _StepEnv(
            self.catalogue,
            self.reward_model,
            self.cfg,
            true_interest=None if self.truth is None else self.truth.interest,
            preference_transform=preference_transform,
        )
        e.drift = self.drift
        return e


def summarise_results(path: Path) -> str:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    out = []
    for setting in SETTINGS:
        here = [r for r in rows if r["setting"] == setting and "variant" not in r]
        if not here:
            continue
        b = here[0]["budget"]
        out.append(
            f"\n### {setting} (G = {here[0]['G']}; {b['updates']} updates x {b['tasks_per_update']} tasks, "
            f"{b['rollouts']} rollouts; seeds {sorted({r['seed'] for r in here})})\n"
        )
        groups = sorted({k for r in here for k, v in r["warm"].items() if isinstance(v, dict)})
        for part in [p for p in ("warm", "cold", "train") if p in here[0]]:
            for grp in [None, *groups]:

                def get(r: dict, m: str, part: str = part, grp: Any = grp) -> float | None:
                    d = r[part] if grp is None else r[part].get(grp, {})
                    return d.get(m)

                ms = [m for m in METRICS if any(get(r, m) is not None for r in here)]
                title = f"{part}" + ("" if grp is None else f", users {grp}")
                n = here[0][part]["n_tasks"] if grp is None else here[0][part].get(grp, {}).get("n_tasks")
                out.append(f"{title} ({n} tasks) | " + " | ".join(ms))
                out.append("|".join(["---"] * (len(ms) + 1)))
                by = {a: {r["seed"]: r for r in here if r["algo"] == a} for a in (*ALGOS, *OPTIONS)}
                for a in (*ALGOS, *OPTIONS):
                    if by[a]:
                        cells = [_ms([get(r, m) for r in by[a].values()]) for m in ms]
                        out.append(f"{a} | " + " | ".join(cells))
                for other in ("gdpo", "grpo"):
                    seeds = sorted(set(by["parpo"]) & set(by[other]))
                    if seeds:
                        cells = [
                            _ms([get(by["parpo"][s], m) - get(by[other][s], m) for s in seeds], sign=True)
                            for m in ms
                        ]
                        out.append(f"parpo − {other} (paired, {len(seeds)} seeds) | " + " | ".join(cells))
                for option in OPTIONS:
                    seeds = sorted(set(by["parpo"]) & set(by[option]))
                    if seeds:
                        cells = [
                            _ms([get(by[option][s], m) - get(by["parpo"][s], m) for s in seeds], sign=True)
                            for m in ms
                        ]
                        out.append(f"{option} − parpo (paired, {len(seeds)} seeds) | " + " | ".join(cells))
                out.append("")
        curves = [r for r in here if "curve_preference" in r]
        if curves:
            out.append("training preference reward at 25/50/75/100 % of updates (mean over seeds):")
            for a in (*ALGOS, *OPTIONS):
                cs = [r["curve_preference"] for r in curves if r["algo"] == a]
                if cs:
                    out.append(
                        f"- {a}: " + " / ".join(f"{statistics.mean(c[i] for c in cs):.3f}" for i in range(4))
                    )
            secs = [r["train_seconds"] for r in here]
            out.append(
                f"- train seconds per run: median {statistics.median(secs):.0f} (min {min(secs):.0f}, max {max(secs):.0f})"
            )
            for a in (*ALGOS, *OPTIONS):
                mine = [r for r in here if r["algo"] == a and "samples_per_s" in r]
                if mine:
                    out.append(
                        f"- {a}: env steps/s in rollouts {_ms([r['samples_per_s'] for r in mine])}, "
                        f"rollouts/s over the run {_ms([r['rollouts_per_s'] for r in mine])}, "
                        f"train s {_ms([r['train_seconds'] for r in mine])}"
                    )
    out += _variants(rows)
    return "\n".join(out)


def _variants(rows: list[dict[str, Any]]) -> list[str]:
    """Ablation runs (``--variant``), next to the main algorithms of their setting, paired by seed."""
    tags = sorted({(r["setting"], r["algo"], r["variant"]) for r in rows if "variant" in r})
    out = ["\n### Variants (ablations)\n"] if tags else []
    for setting, algo, tag in tags:
        mine = {
            r["seed"]: r for r in rows if (r["setting"], r["algo"], r.get("variant")) == (setting, algo, tag)
        }
        overrides = " ".join(next(iter(mine.values()))["overrides"])
        for part in [p for p in ("warm", "train") if p in next(iter(mine.values()))]:
            ms = [m for m in METRICS if next(iter(mine.values()))[part].get(m) is not None]
            out.append(f"{setting}, {algo} [{tag}: {overrides}], {part} | " + " | ".join(ms))
            out.append("|".join(["---"] * (len(ms) + 1)))
            out.append(
                f"{algo} [{tag}] | " + " | ".join(_ms([r[part][m] for r in mine.values()]) for m in ms)
            )
            for base in dict.fromkeys((*ALGOS, algo)):  # and the variant's own algorithm
                by = {
                    r["seed"]: r
                    for r in rows
                    if r["setting"] == setting and r["algo"] == base and "variant" not in r
                }
                seeds = sorted(set(by) & set(mine))
                if seeds:
                    cells = [_ms([mine[x][part][m] - by[x][part][m] for x in seeds], sign=True) for m in ms]
                    out.append(f"[{tag}] − {base} (paired, {len(seeds)} seeds) | " + " | ".join(cells))
            out.append("")
    return out


def paired(mine: dict[int, dict], theirs: dict[int, dict], part: str, grp: str | None) -> dict[str, Any]:
    """``mine`` minus ``theirs`` (runs by seed) on one part (and user group): per metric the mean
    difference over the (seed, task) pairs both have, its 95% percentile bootstrap interval over
    those pairs (``parpo.evaluation.compare.paired_differences``) and ``wins``/``losses``: the
    seeds whose own mean difference is above / below 0."""
    import polars as pl

    from parpo.evaluation.compare import paired_differences

    def frame(runs: dict[int, dict], seeds: list[int]) -> pl.DataFrame:
        parts = []
        for s in seeds:
            pt = runs[s]["per_task"][part]
            f = pl.DataFrame({k: pt[k] for k in ("task_id", *TASK_METRICS, "group") if k in pt})
            f = f if grp is None else f.filter(pl.col("group") == grp)
            parts.append(
                f.with_columns(
                    pl.lit(part).alias("part"), (pl.lit(f"s{s}/") + pl.col("task_id")).alias("task_id")
                )
            )
        return pl.concat(parts)

    seeds = sorted(set(mine) & set(theirs))
    if not seeds:
        return {"n_seeds": 0}
    a, b = frame(mine, seeds), frame(theirs, seeds)
    out: dict[str, Any] = {"n_seeds": len(seeds)} | paired_differences(a, b)[part]
    joined = a.join(b, on=["part", "task_id"], suffix="_b").with_columns(
        pl.col("task_id").str.split("/").list.first().alias("seed")
    )
    for m in TASK_METRICS:
        if m in out:
            per_seed = joined.group_by("seed").agg((pl.col(m) - pl.col(f"{m}_b")).mean().alias("d"))["d"]
            out[m] |= {"wins": int((per_seed > 0).sum()), "losses": int((per_seed < 0).sum())}
    return out


def _task_values(r: dict[str, Any], part: str, m: str, grp: str | None) -> list[float]:
    pt = r["per_task"][part]
    if m not in pt:  # e.g. true preference on real data
        return []
    return pt[m] if grp is None else [v for v, g in zip(pt[m], pt["group"], strict=True) if g == grp]


def summarise_v2(path: Path) -> str:
    """Study v2's tables (issue 17): per setting and family of runs (the main algorithms; each
    ``--variant``), part and user group: every arm's mean ± std over seeds, anchor coverage, and
    paired differences — mean over (task, seed) pairs with a 95% bootstrap interval, and the
    seeds where each side's mean is higher. A variant with parpo and others (e.g. the personal
    signal off) is compared within itself (``parpo[v] − gdpo[v]``); one of a single algorithm (an
    ablation) against the parpo and gdpo of its base: the variant whose overrides are the largest
    proper subset of its own (the personal signal off, for an ablation run with it off), else the
    main runs."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    out = []
    for setting in SETTINGS:
        here = [r for r in rows if r["setting"] == setting]
        overrides = {r.get("variant"): set(r.get("overrides", [])) for r in here}
        for tag in sorted({r.get("variant") for r in here}, key=lambda t: (t is not None, t or "")):
            fam = [r for r in here if r.get("variant") == tag]
            arms = {
                a: {r["seed"]: r for r in fam if r["algo"] == a}
                for a in dict.fromkeys(r["algo"] for r in fam)
            }
            base = max(
                (t for t, o in overrides.items() if o < overrides[tag]),
                key=lambda t: len(overrides[t]),
                default=None,
            )
            main = {
                a: {r["seed"]: r for r in here if r["algo"] == a and r.get("variant") == base} for a in ALGOS
            }
            within = tag is None or ("parpo" in arms and len(arms) > 1)
            if within:
                pairs = [
                    (arms["parpo"], arms[o], "parpo", o) for o in arms if o != "parpo" and "parpo" in arms
                ]
            else:
                pairs = [(arms[a], main[b], a, b) for a in arms for b in ("parpo", "gdpo") if main[b]]
            b, label = fam[0]["budget"], f" [{tag}]" if tag else ""
            over = " ".join(fam[0].get("overrides", []))
            out.append(f"\n### {setting}{f' [{tag}: {over}]' if tag else ''} (G = {fam[0]['G']}; "
                       f"{b['updates']} updates x {b['tasks_per_update']} tasks, {b['rollouts']} rollouts)\n")  # fmt: skip
            groups = sorted({g for r in fam for g in r["per_task"]["warm"].get("group", [])})
            for part in ("warm", "cold"):
                for grp in [None, *groups]:
                    n = len(_task_values(fam[0], part, "task_quality", grp))
                    out.append(f"{part}{'' if grp is None else f', users {grp}'} ({n} tasks) | n seeds | "
                               + " | ".join(TASK_METRICS))  # fmt: skip
                    out.append("|".join(["---"] * (len(TASK_METRICS) + 2)))
                    for a, by in arms.items():
                        cells = [_ms([statistics.mean(v) if (v := _task_values(r, part, m, grp)) else None
                                      for r in by.values()]) for m in TASK_METRICS]  # fmt: skip
                        out.append(f"{a}{label} | {len(by)} | " + " | ".join(cells))
                    for mine, theirs, a, o in pairs:
                        d = paired(mine, theirs, part, grp)
                        if not d["n_seeds"] or not d.get("n_pairs"):
                            continue
                        cells = [f"{c['diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] {c['wins']}:{c['losses']}"
                                 if (c := d.get(m)) else "—" for m in TASK_METRICS]  # fmt: skip
                        ref = "" if within or tag is None else f" [{base}]" if base else " (main)"
                        out.append(f"{a}{label} − {o}{ref} | {d['n_seeds']} | " + " | ".join(cells))
                    out.append("")
            for a, by in arms.items():
                cover = [r["frac_anchored"] for r in by.values() if "frac_anchored" in r]
                if cover:
                    out.append(
                        f"- {a}: anchor coverage (frac_anchored) mean {_ms([c['mean'] for c in cover])}, "
                        f"last 10 updates {_ms([c['last10'] for c in cover])}; anchor sets b on "
                        f"{_ms([r['frac_anchor_baseline']['mean'] for r in by.values() if 'frac_anchor_baseline' in r])}, "
                        f"s on {_ms([r['frac_anchor_scale']['mean'] for r in by.values() if 'frac_anchor_scale' in r])} "
                        "of rollouts (mean over updates)"
                    )
                out.append(f"- {a}: train s per run {_ms([r['train_seconds'] for r in by.values()])}")
    out.append("\nDifferences: mean over (task, seed) pairs [95% bootstrap interval] wins:losses (seeds "
               "whose mean difference is > 0 : < 0).")  # fmt: skip
    return "\n".join(out)


CURVES = ("preference", "task/constraints", "task/items_valid", "task/valid_calls", "task/efficiency")


def plot_curves(path: Path, out: Path) -> list[str]:
    """Training curves per reward component (mean over seeds, one line per algorithm), one row
    per setting, from the runs' ``logs/metrics.csv`` still on disk; returns the settings drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import polars as pl

    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    runs = [r for r in rows if Path(r["curves_csv"]).is_file()]
    settings = [s for s in SETTINGS if any(r["setting"] == s for r in runs)]
    fig, axes = plt.subplots(len(settings), len(CURVES), figsize=(3.2 * len(CURVES), 2.4 * len(settings)),
                             squeeze=False)  # fmt: skip
    for i, setting in enumerate(settings):
        for a, algo in enumerate(ALGOS):
            logs = [
                pl.read_csv(r["curves_csv"]) for r in runs if r["setting"] == setting and r["algo"] == algo
            ]
            for j, comp in enumerate(CURVES):
                ys = [
                    log[f"reward/{comp}/mean"].to_numpy()
                    for log in logs
                    if f"reward/{comp}/mean" in log.columns
                ]
                if ys:
                    n = min(len(y) for y in ys)
                    axes[i][j].plot(np.arange(1, n + 1), np.mean([y[:n] for y in ys], axis=0), f"C{a}",
                                    label=f"{algo} ({len(ys)} seeds)")  # fmt: skip
        for j, comp in enumerate(CURVES):
            axes[i][j].set_title(f"{setting}: {comp}", fontsize=9)
            axes[i][j].tick_params(labelsize=7)
        axes[i][0].legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("update", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=80)
    tmp.replace(out)  # atomic: a reader never sees half a PNG
    return settings


def _ms(xs: list[float | None], sign: bool = False) -> str:
    v = [x for x in xs if x is not None]
    if not v:
        return "—"
    fmt = "+.3f" if sign else ".3f"
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return f"{statistics.mean(v):{fmt}} ± {sd:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setting", choices=SETTINGS)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/policy-compare"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--algos", nargs="+", default=list(ALGOS), choices=(*ALGOS, *OPTIONS))
    ap.add_argument("--results", type=Path, help=f"default {RESULTS.name}, study 2: {RESULTS_V2.name}")
    ap.add_argument(
        "--study", type=int, choices=(1, 2), default=1,
        help="1: issue 7's 16 x 64 budget; 2: the preset's budget, per-task values kept (issue 17)",
    )  # fmt: skip
    ap.add_argument("--summarise", action="store_true", help="print the markdown tables of --results")
    ap.add_argument("--plot", type=Path, help="write the training curves per reward component (PNG)")
    ap.add_argument("--variant", help="an ablation's tag: its runs are recorded apart from the main tables")
    ap.add_argument(
        "--override", nargs="+", default=[], metavar="KEY=VALUE", help="the variant's config overrides"
    )
    args = ap.parse_args()
    if bool(args.variant) != bool(args.override):
        ap.error("--variant and --override go together")
    args.results = args.results or (RESULTS_V2 if args.study == 2 else RESULTS)
    if args.summarise or args.plot:
        if args.summarise:
            print(summarise_v2(args.results) if args.study == 2 else summarise_results(args.results))
        if args.plot:
            print(f"{args.plot}: {', '.join(plot_curves(args.results, args.plot))}")
        return
    if args.setting is None:
        ap.error("--setting or --summarise")
    import torch

    torch.set_num_threads(1)
    data, reg = data_for(args.setting, args.workdir)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.results.is_file():  # the study runs in parts: a rerun skips what is recorded
        for x in args.results.read_text().splitlines():
            r = json.loads(x)
            done.add((r["setting"], r["algo"], r["seed"], r.get("study", 1), r.get("variant")))
    for seed in args.seeds:  # seed-major: an interrupted study still has complete pairs
        for algo in args.algos:
            if (args.setting, algo, seed, args.study, args.variant) in done:
                continue
            variant = (args.variant, args.override) if args.variant else None
            line = one_run(args.setting, algo, seed, data, reg, args.workdir, variant, args.study)
            print(json.dumps(line), flush=True)
            with args.results.open("a") as f:
                f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
