"""Run an agent over a task set; per-task results (a polars frame) and their summary.

Metrics of an episode (every one a number; an episode without a slate scores 0):
``hit@10``, ``ndcg@10`` (the slate against the task's held-out item), ``task_quality`` (the
env config's weighted sum of the ``task/<name>`` components, in [0, 1]), ``preference`` (the
reward model's preference reward after any transform) and, on synthetic data only,
``true_preference`` (the mean true interest of the slate; the key is absent elsewhere, never
null). ``plan_diversity`` is the entropy (bits) of the plan signatures over the tasks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from parpo.env.baselines import PLANS, Agent, GreedyRewardAgent, PlanAgent, RandomAgent, popularity_agent
from parpo.env.environment import COMPONENTS, BatchEnv
from parpo.env.episodes import step_until_done
from parpo.env.tasks import Task

METRICS: tuple[str, ...] = ("hit@10", "ndcg@10", "task_quality", "preference", "true_preference")


def run_episodes(env: BatchEnv, agent: Agent, tasks: Sequence[Task], batch_size: int = 4096) -> pl.DataFrame:
    """One episode per task; one row per task with its components, metrics, plan and slate."""
    rows: list[dict[str, Any]] = []
    for start in range(0, len(tasks), batch_size):
        chunk = tasks[start : start + batch_size]
        result: list[dict[str, Any] | None] = [None] * len(chunk)
        for step in step_until_done(env, chunk, agent.act):
            for i in step.active[step.ended].tolist():
                t, info = chunk[i], step.infos[i]
                result[i] = {
                    "task_id": t.task_id,
                    "user_id": t.user_id,
                    "target": t.target,
                    "cold": t.cold,
                    "terminated": bool(step.terminated[i]),
                    "truncated": bool(step.truncated[i]),
                    "steps": info["steps"],
                    "plan": info["plan"],
                    "slate": info["slate"],
                    **{m: info[m] for m in METRICS if m in info},
                    "preference": float(step.rewards["preference"][i]),
                    **{k: float(step.rewards[k][i]) for k in COMPONENTS if k != "preference"},
                }
        rows.extend(r for r in result if r is not None)
    return pl.DataFrame(rows, schema_overrides={"slate": pl.List(pl.String)})


def summarise(per_task: pl.DataFrame) -> dict[str, Any]:
    """Means of the metrics over tasks, ``n_tasks`` and ``plan_diversity`` (bits)."""
    out: dict[str, Any] = {"n_tasks": per_task.height}
    for m in METRICS:
        if m in per_task.columns:
            out[m] = float(per_task[m].mean()) if per_task.height else 0.0
    # Sorted: value_counts order varies between runs, and float sums must not (add-only evals).
    counts = sorted(per_task["plan"].value_counts()["count"].to_list()) if per_task.height else []
    n = sum(counts)
    out["plan_diversity"] = sum(-(c / n) * math.log2(c / n) for c in counts) if n else 0.0
    return out


def select_fixed_plan(
    env: BatchEnv, tasks: Sequence[Task], search_k: int
) -> tuple[PlanAgent, list[dict[str, Any]]]:
    """The plan of ``PLANS`` with the highest mean ``task_quality + preference`` on ``tasks``
    (training tasks: the plan is chosen before any evaluation task is seen). Returns the
    agent and every plan's score."""
    scores = []
    for plan in PLANS:
        s = summarise(run_episodes(env, PlanAgent(plan, search_k), tasks))
        scores.append({"plan": plan.label, "task_quality": s["task_quality"], "preference": s["preference"]})
    best = max(range(len(PLANS)), key=lambda j: scores[j]["task_quality"] + scores[j]["preference"])
    return PlanAgent(PLANS[best], search_k), scores


def baseline_agents(env: BatchEnv, train_tasks: Sequence[Task], seed: int = 0) -> list[Agent]:
    """The four reference agents; the fixed plan is selected on ``train_tasks``."""
    k = env.cfg.search_k
    fixed, _ = select_fixed_plan(env, train_tasks, k)
    return [RandomAgent(k, seed), popularity_agent(), fixed, GreedyRewardAgent(env.reward_model)]
