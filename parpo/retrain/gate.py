"""The gate of a retrain: is the candidate non-inferior to production on the held-out sets?

``configs/gate/default.yaml`` states the checks. Each check pairs candidate and production on
the same users of one held-out set (``old``: pairs of the rows the base was trained beside;
``new``: pairs of the newest rows; ``parpo.retrain.heldout``), takes the per-user difference
d_u = m_cand(u) - m_prod(u) of one metric and its percentile bootstrap interval over users
(``parpo.evaluation.ope.bootstrap``), and passes when

    non_inferior    ci_low  > -margin
    no_regression   ci_high >= -margin     (not significantly worse than -margin)

A set with fewer than ``min_users`` paired users cannot decide: its checks are ``skipped``.
The gate passes when no check fails and at least one passed.

Policy candidates (``--policy``) also face ``policy`` checks (greedy episodes on held-out tasks,
paired per task) and ``ope`` checks (off-policy estimates on the sampled server decisions the new
data holds, paired per logged request: the units are requests there, ``min_users`` counts them).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from parpo_core.config import StrictModel

METRICS = ("ndcg@10", "recall@10", "hit@10", "mrr@10")


class Check(StrictModel):
    """A reward check: per-user ranking metric on one held-out set."""

    set: Literal["old", "new"] = Field(description="old: the base's held-out pairs; new: the newest rows'")
    metric: Literal["ndcg@10", "recall@10", "hit@10", "mrr@10"] = Field(description="per-user ranking metric")
    margin: float = Field(ge=0, description="how much worse than production the candidate may be")
    rule: Literal["non_inferior", "no_regression"] = Field(
        "non_inferior", description="non_inferior: ci_low > -margin; no_regression: ci_high >= -margin"
    )


class PolicyCheck(StrictModel):
    """A policy check: per-task metric on the warm (test) or cold (cold_test) held-out tasks."""

    set: Literal["warm", "cold"] = Field(description="warm: test tasks; cold: cold users' tasks")
    metric: Literal["hit@10", "ndcg@10", "task_quality", "true_preference"] = Field(
        description="per-task metric (true_preference: synthetic data only, else skipped)"
    )
    margin: float = Field(ge=0, description="how much worse than production the candidate may be")
    rule: Literal["non_inferior", "no_regression"] = Field(
        "non_inferior", description="non_inferior: ci_low > -margin; no_regression: ci_high >= -margin"
    )


class OpeCheck(StrictModel):
    """An off-policy check (with ``--policy``): the policies' estimated reward per logged slot on
    the sampled server decisions the new data holds (``parpo data ingest --source parpo-events``),
    paired per request; skipped when the data holds none."""

    set: Literal["served"] = Field("served", description="the sampled decisions in the new data")
    metric: Literal["ips", "dm", "dr"] = Field(
        "dr", description="estimator (linear ones, so the per-request terms pair)"
    )
    margin: float = Field(ge=0, description="how much worse than production the candidate may be")
    rule: Literal["non_inferior", "no_regression"] = Field(
        "no_regression", description="non_inferior: ci_low > -margin; no_regression: ci_high >= -margin"
    )
    temperature: float = Field(1.0, ge=0, description="the policies' sampling temperature (0: greedy)")
    samples: int = Field(64, ge=1, description="policy samples per logged request for pi_e")


class GateConfig(StrictModel):
    """The ``gate`` config group (``configs/gate/*.yaml``)."""

    confidence: float = Field(0.95, gt=0.5, lt=1, description="two-sided level of the paired intervals")
    n_boot: int = Field(1000, ge=100, description="bootstrap resamples over users")
    seed: int = Field(0, description="seed of the bootstrap")
    min_users: int = Field(10, ge=1, description="fewer paired users in a set: its checks are skipped")
    reward: list[Check] = Field(min_length=1, description="checks of a reward candidate")
    policy: list[PolicyCheck] = Field(default_factory=list, description="checks of a policy candidate")
    ope: list[OpeCheck] = Field(
        default_factory=list,
        description="off-policy checks of a policy candidate on the served logs in the data",
    )
    tasks: int = Field(500, ge=1, description="held-out tasks per part (hash-stable sample) for policies")


def paired_interval(diff: np.ndarray, cfg: GateConfig) -> dict[str, float]:
    """Mean and percentile bootstrap interval of the per-user differences ``diff`` [U]."""
    from parpo.evaluation.ope.bootstrap import bootstrap
    from parpo.evaluation.ope.estimators import Terms

    stats, _ = bootstrap({"d": Terms(diff.astype(np.float64))}, cfg.n_boot, 1 - cfg.confidence, cfg.seed)
    s = stats["d"]
    return {"diff": s["estimate"], "ci_low": s["ci_low"], "ci_high": s["ci_high"], "se": s["se"]}


def judge(
    check: Check | PolicyCheck | OpeCheck, cand: np.ndarray, prod: np.ndarray, cfg: GateConfig
) -> dict[str, Any]:
    """One check on the per-user metrics of the candidate and production ([U] each, paired)."""
    out: dict[str, Any] = check.model_dump() | {"n_users": int(cand.size)}
    if cand.size < cfg.min_users:
        return out | {
            "result": "skipped",
            "why": f"{cand.size} paired users, under min_users {cfg.min_users}",
        }
    ci = paired_interval(cand - prod, cfg)
    out |= {"candidate": float(cand.mean()), "production": float(prod.mean()), **ci}
    if check.rule == "non_inferior":
        ok, bound = ci["ci_low"] > -check.margin, f"ci_low {ci['ci_low']:+.4f}"
    else:
        ok, bound = ci["ci_high"] >= -check.margin, f"ci_high {ci['ci_high']:+.4f}"
    op = ">" if check.rule == "non_inferior" else ">="
    verdict = "holds" if ok else "fails"
    why = f"{check.set} {check.metric}: {bound} {op} -{check.margin:g} {verdict}"
    return out | {"result": "pass" if ok else "fail", "why": why}


def decide(checks: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"passed": bool, "why": [...]}`` from the judged checks (see the module docstring)."""
    failed = [c["why"] for c in checks if c["result"] == "fail"]
    passed = [c for c in checks if c["result"] == "pass"]
    if failed:
        return {"passed": False, "why": failed}
    if not passed:
        return {
            "passed": False,
            "why": ["every check was skipped: no held-out set is large enough to decide"],
        }
    return {"passed": True, "why": [c["why"] for c in passed]}
