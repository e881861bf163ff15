"""Evaluate a published policy on held-out tasks, next to the four reference agents (and
``oracle_true``, ``greedy_reward`` ranking by the true interest, where the data knows the truth).

Warm tasks come from the test part of the reward version's split, cold ones from the held-out
users' ``cold_test`` (``parpo.env.tasks``); each set is cut to a fixed-size, hash-stable sample
(``parpo.evaluation.sample``, the same tasks for every agent and version), and so is the
training set the fixed-plan reference is selected on. Every mean comes with a percentile
bootstrap interval over the evaluated tasks (``ci95``). The policy acts greedily (temperature 0)
unless asked to sample. The summary is recorded as the version's add-only
``evals/<data-fingerprint>-<split>-<eval-config-hash>.json``; the per-task results go beside it
(same stem, ``.tasks.parquet``: one row per agent and task) so later comparisons can pair them.
``parpo eval compare`` (``parpo.evaluation.compare``) runs this for each version and pairs
those parquets; ``parpo eval report`` reads them.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from parpo.env.baselines import Agent, oracle_true_agent
from parpo.env.environment import BatchEnv
from parpo.env.evaluate import METRICS, baseline_agents, run_episodes, summarise
from parpo.env.source import EnvSource
from parpo.evaluation.ope.bootstrap import bootstrap
from parpo.evaluation.ope.estimators import Terms
from parpo.evaluation.sample import EvalSample, sample_tasks
from parpo.policy.agent import PolicyAgent
from parpo.policy.bundle import KIND, PolicyBundle
from parpo_core.durable import atomic_write_bytes
from parpo_core.errors import DataError

SCHEMA_VERSION = 1
BASELINES = ("random", "popularity", "fixed_plan", "greedy_reward")
PARTS = ("warm", "cold")


def _metrics(summary: dict[str, Any]) -> dict[str, float]:
    return {m: float(summary[m]) for m in METRICS if m in summary}


def _section(
    env: BatchEnv, agents: Sequence[Agent], tasks: Sequence[Any], part: str, sample: EvalSample
) -> tuple[dict[str, Any], pl.DataFrame]:
    frames, out = [], {"n_tasks": len(tasks), "baselines": {}}
    for agent in agents:
        per_task = run_episodes(env, agent, tasks)
        s = summarise(per_task)
        if agent.name == "policy":
            out["policy"] = _metrics(s)
            out["plan_diversity"] = float(s["plan_diversity"])
            out["distinct_plans"] = int(per_task["plan"].n_unique()) if per_task.height else 0
        else:
            out["baselines"][agent.name] = _metrics(s)
        frames.append(per_task.with_columns(pl.lit(agent.name).alias("agent"), pl.lit(part).alias("part")))
    out["ci95"] = _intervals(frames, sample) if tasks else {}
    return out, pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def _intervals(frames: Sequence[pl.DataFrame], sample: EvalSample) -> dict[str, dict[str, list[float]]]:
    """agent -> metric -> [low, high]: 95% percentile bootstrap intervals of the means, every
    agent and metric on the same task resamples (the frames' rows are the same tasks in order)."""
    cells = [
        (f["agent"][0], m, f[m].to_numpy().astype(np.float64))
        for f in frames
        for m in METRICS
        if m in f.columns
    ]
    stats, _ = bootstrap(
        {str(j): Terms(v) for j, (_, _, v) in enumerate(cells)}, n_boot=sample.n_boot, seed=sample.seed
    )
    out: dict[str, dict[str, list[float]]] = {}
    for j, (agent, m, _) in enumerate(cells):
        out.setdefault(agent, {})[m] = [stats[str(j)]["ci_low"], stats[str(j)]["ci_high"]]
    return out


def evaluate_policy(
    registry: str | Path,
    data_dir: str | Path,
    version: str | None = None,
    *,
    greedy: bool = True,
    seed: int = 0,
    sample: EvalSample | None = None,
    also: Sequence[Agent] = (),
) -> tuple[Path, dict[str, Any]]:
    """Evaluate ``version`` (default: production) on ``data_dir``; record and return the result.

    ``sample``: the task sample (default ``EvalSample()``; ``EvalSample.full()`` for every task).
    ``also``: more agents run on the same tasks, reported beside the reference agents under their
    names (e.g. the previous production policy grown to this catalogue, ``parpo demo --loop``).
    """
    from parpo_core.artefacts import Registry

    sample = sample or EvalSample()
    bundle = PolicyBundle.load(registry, version)
    env_cfg = bundle.env
    src = EnvSource.load(data_dir, registry, bundle.reward_version, env_cfg)
    if src.catalogue.item_ids != bundle.catalogue.item_ids:
        raise DataError(
            f"{data_dir}: its catalogue ({len(src.catalogue)} items) is not the one policy "
            f"{bundle.version.name} was trained with ({len(bundle.catalogue)}); evaluate on that dataset"
        )
    env = src.env()
    train = sample_tasks(src.tasks("train"), sample.plan_selection, sample.seed)
    agents = [
        PolicyAgent(bundle.policy, greedy=greedy, seed=seed),
        *baseline_agents(env, train, env_cfg.seed),
        *([oracle_true_agent(src.truth.interest)] if src.truth is not None else []),
        *also,
    ]
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "policy_version": bundle.version.name,
        "reward_version": bundle.reward_version,
        "data_fingerprint": src.dataset.fingerprint,
        "split": bundle.version.lineage.split.name,
        "split_algorithm": bundle.version.lineage.split.algorithm,
        "greedy": greedy,
        "sample": sample.model_dump(mode="json"),
    }
    frames = []
    for part in PARTS:
        tasks = src.tasks(part, capped=False)
        result[part], frame = _section(
            env, agents, sample_tasks(tasks, getattr(sample, part), sample.seed), part, sample
        )
        result[part]["tasks_available"] = len(tasks)
        frames.append(frame)
    result["plan_diversity"] = {p: result[p].pop("plan_diversity", 0.0) for p in PARTS}
    eval_config = {
        "greedy": greedy,
        "seed": seed,
        "env": env_cfg.model_dump(mode="json"),
        "sample": sample.model_dump(mode="json"),
        **({"also": [a.name for a in also]} if also else {}),  # keeps earlier configs' hashes
    }
    reg = Registry(registry)
    path = reg.add_eval(
        KIND, bundle.version.name, src.dataset.fingerprint, result["split"], eval_config, result
    )
    _write_parquet(pl.concat(frames, how="diagonal_relaxed"), tasks_path(path))
    return path, result


def tasks_path(eval_path: Path) -> Path:
    """The per-task parquet recorded beside the eval file ``eval_path``."""
    return eval_path.with_suffix(".tasks.parquet")


def read_tasks(eval_path: Path) -> pl.DataFrame:
    """The per-task results of the eval recorded at ``eval_path`` (one row per agent and task)."""
    return pl.read_parquet(tasks_path(eval_path))


def _write_parquet(df: pl.DataFrame, path: Path) -> None:
    buf = io.BytesIO()
    df.write_parquet(buf)
    atomic_write_bytes(path, buf.getvalue())
