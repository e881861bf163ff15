"""Paired comparison of policy versions on the same held-out tasks (``parpo eval compare``).

Each version is evaluated by ``evaluate_policy`` (the single-policy case, which records its own
eval and per-task parquet). The policy rows of the per-task parquets are then paired by
``(part, task_id)``; for every pair of versions and every metric the paired difference
d_t = m_a(t) - m_b(t) is summarised by its mean and a percentile bootstrap interval over tasks
(``ope.bootstrap``: the same B task resamples for every metric of a part, so the intervals of
one part are jointly resampled). Version a's ``evals/`` records a - b for every other b.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from parpo.env.evaluate import METRICS
from parpo.evaluation.ope.bootstrap import bootstrap
from parpo.evaluation.ope.estimators import Terms
from parpo.evaluation.policy_eval import PARTS, evaluate_policy, read_tasks
from parpo.evaluation.sample import EvalSample
from parpo.policy.bundle import KIND

SCHEMA_VERSION = 1


def paired_differences(
    a: pl.DataFrame, b: pl.DataFrame, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> dict[str, dict[str, Any]]:
    """Per part (warm, cold) and metric: ``mean_a``, ``mean_b``, ``diff`` (mean of a - b over the
    tasks both hold), ``ci_low``/``ci_high`` (percentile, level 1 - alpha), ``se`` and
    ``n_pairs``, ``n_boot``. a, b: per-task rows of one agent each (``part``, ``task_id`` and the
    metric columns). A part with no common task is reported with ``n_pairs`` 0 only."""
    metrics = [m for m in METRICS if m in a.columns and m in b.columns]
    joined = a.select("part", "task_id", *metrics).join(
        b.select("part", "task_id", *metrics), on=["part", "task_id"], suffix="_b"
    )
    out: dict[str, dict[str, Any]] = {}
    for part in PARTS:
        rows = joined.filter(pl.col("part") == part).sort("task_id")
        if rows.height == 0:
            out[part] = {"n_pairs": 0}
            continue
        terms = {m: Terms((rows[m] - rows[f"{m}_b"]).to_numpy().astype(np.float64)) for m in metrics}
        stats, _ = bootstrap(terms, n_boot=n_boot, alpha=alpha, seed=seed)
        sec: dict[str, Any] = {"n_pairs": rows.height}
        for m in metrics:
            s = stats[m]
            sec[m] = {
                "mean_a": float(rows[m].mean()),
                "mean_b": float(rows[f"{m}_b"].mean()),
                "diff": s["estimate"],
                "ci_low": s["ci_low"],
                "ci_high": s["ci_high"],
                "se": s["se"],
                "n_boot": n_boot,
            }
        out[part] = sec
    return out


def compare_policies(
    registry: str | Path,
    data_dir: str | Path,
    versions: Sequence[str],
    *,
    greedy: bool = True,
    seed: int = 0,
    n_boot: int = 1000,
    sample: EvalSample | None = None,
) -> tuple[list[Path], list[dict[str, Any]]]:
    """Evaluate every version on ``data_dir`` (on ``sample``'s tasks, the same for every version),
    pair their per-task results and record each version's differences against the others in its
    ``evals/``. Returns the recorded paths and results, in the order of ``versions``."""
    from parpo_core.artefacts import Registry
    from parpo_core.errors import UserError

    if len(versions) < 2:
        raise UserError(
            f"--policies: give two or more versions to compare; got {', '.join(versions) or 'none'}"
        )
    evals = [
        evaluate_policy(registry, data_dir, v, greedy=greedy, seed=seed, sample=sample) for v in versions
    ]
    names = [r["policy_version"] for _, r in evals]
    if len(set(names)) != len(names):
        raise UserError(f"--policies {' '.join(versions)}: names the same version twice ({', '.join(names)})")
    keys = {(r["data_fingerprint"], r["split"], r["split_algorithm"]) for _, r in evals}
    if len(keys) != 1:
        raise UserError(
            f"--policies: {', '.join(names)} were trained on different data or splits "
            f"({sorted(keys)}); their tasks cannot be paired"
        )
    tasks = {
        n: read_tasks(p).filter(pl.col("agent") == "policy") for n, (p, _) in zip(names, evals, strict=True)
    }
    reg = Registry(registry)
    paths, results = [], []
    for name, (eval_path, res) in zip(names, evals, strict=True):
        others = [n for n in names if n != name]
        result = {
            "schema_version": SCHEMA_VERSION,
            "policy_version": name,
            "reward_version": res["reward_version"],
            "data_fingerprint": res["data_fingerprint"],
            "split": res["split"],
            "greedy": greedy,
            "policy_eval": eval_path.name,
            "against": {
                o: paired_differences(tasks[name], tasks[o], n_boot=n_boot, seed=seed) for o in others
            },
        }
        # The single-policy eval's file name carries its env config hash; naming it here keeps a
        # comparison under another env config from colliding with this one (add-only evals).
        config = {"compare_with": sorted(others), "greedy": greedy, "seed": seed, "n_boot": n_boot,
                  "policy_eval": eval_path.name}  # fmt: skip
        paths.append(reg.add_eval(KIND, name, res["data_fingerprint"], res["split"], config, result))
        results.append(result)
    return paths, results
