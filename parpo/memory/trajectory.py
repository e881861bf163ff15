"""Trajectories the memory learns from, and which of them are worth distilling.

A trajectory is one finished episode seen through the memory's eyes: who, which scenario, the
plan (call signatures, ``parpo.env.observation.Call.signature``), its argument preferences and
its reward components. ``judge`` applies the distillation rule of issue 21:

    threshold[i, c] = anchor mean of user i for component c    when the user has that anchor
                    = the batch's ``q`` quantile of component c otherwise
    high[i]         = every c: reward[i, c] >= threshold[i, c], and some c: reward[i, c] > threshold[i, c]
    margin[i]       = mean over c of (reward[i, c] - threshold[i, c])
    low[i]          = every c: reward[i, c] <= lower[i, c], and some c: <  (lower: anchor, or the
                      1 - q quantile)

That is ``rule="pareto"``, ``MemoryConfig.high_value_rule``'s default: a tie with a threshold
counts, one component must be above. ``"strict"`` (every component above, every one below) was
the first rule and stays for memories saved with it: under it a component most of a batch tops
out on (task quality 1.0 once a policy meets most requests) has its quantile at the maximum, so
no trajectory is ever high-value again (benchmarks/README.md, "the default distillation rule").

The training loop keeps an anchor for the preference reward only (``AnchorStore``), so task
quality is held to the batch quantile and preference to the user's own anchor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from parpo.env.observation import Call
from parpo.env.schema import Search
from parpo.env.tasks import Task
from parpo.memory.scenario import Query

#: (mean [U], count [U]) of one reward component's per-user anchors, indexed by user index.
AnchorArrays = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Trajectory:
    """``user``: dense user index (-1: unknown to the id maps); ``rewards``: component -> value."""

    traj_id: str
    user: int
    query: Query
    plan: tuple[str, ...]
    strategy: str | None
    constrained: bool
    attributes: tuple[str, ...]
    k: int
    rewards: Mapping[str, float] = field(default_factory=dict)


def from_episode(
    traj_id: str, user: int, task: Task, calls: Sequence[Call], slate: int, rewards: Mapping[str, float]
) -> Trajectory:
    """A trajectory from an episode's calls: the argument preferences are its last valid search's
    (strategy, whether it set constraints, its soft attributes) and the slate's length."""
    searches = [c.action for c in calls if c.valid and isinstance(c.action, Search)]
    last = searches[-1] if searches else None
    constrained = any(c.signature == "filter" for c in calls) or (
        last is not None and not last.constraints.empty
    )
    return Trajectory(
        traj_id=traj_id,
        user=user,
        query=Query.of(task.request),
        plan=tuple(c.signature for c in calls),
        strategy=last.strategy if last is not None else None,
        constrained=constrained,
        attributes=tuple(last.attributes) if last is not None else (),
        k=slate,
        rewards=dict(rewards),
    )


def thresholds(
    trajectories: Sequence[Trajectory],
    components: Sequence[str],
    anchors: Mapping[str, AnchorArrays] | None,
    q: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``rewards``, ``upper`` and ``lower`` thresholds, each [N, C] float64: the user's anchor mean
    where the user has one for the component, else the batch's ``q`` and ``1 - q`` quantiles."""
    n, c = len(trajectories), len(components)
    r = np.array([[t.rewards[k] for k in components] for t in trajectories], dtype=np.float64).reshape(n, c)
    if n == 0:
        return r, r.copy(), r.copy()
    upper = np.broadcast_to(np.quantile(r, q, axis=0), (n, c)).copy()
    lower = np.broadcast_to(np.quantile(r, 1.0 - q, axis=0), (n, c)).copy()
    user = np.array([t.user for t in trajectories], dtype=np.int64)
    for j, k in enumerate(components):
        if anchors is None or k not in anchors:
            continue
        mean, count = (np.asarray(a) for a in anchors[k])
        inside = (user >= 0) & (user < len(count))
        has = np.zeros(n, dtype=bool)
        has[inside] = count[user[inside]] > 0
        upper[has, j] = lower[has, j] = mean.astype(np.float64)[user[has]]
    return r, upper, lower


@dataclass(frozen=True)
class Judgement:
    """A batch's verdicts, each [N]: ``high`` / ``low`` (bool, the rule), ``margin`` (mean of
    reward - upper threshold) and ``centred`` (mean of reward - the middle of the two thresholds:
    the user's anchor itself when there is one)."""

    high: np.ndarray
    low: np.ndarray
    margin: np.ndarray
    centred: np.ndarray


def judge(
    trajectories: Sequence[Trajectory],
    components: Sequence[str],
    anchors: Mapping[str, AnchorArrays] | None,
    q: float,
    rule: str,
) -> Judgement:
    """The module docstring's rule applied to a batch of trajectories."""
    r, upper, lower = thresholds(trajectories, components, anchors, q)
    high, low = classify(r, upper, lower, rule)
    return Judgement(high, low, (r - upper).mean(axis=1), (r - (upper + lower) / 2).mean(axis=1))


def classify(r: np.ndarray, upper: np.ndarray, lower: np.ndarray, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """``high`` and ``low`` [N] bool of rewards ``r`` against the thresholds (all [N, C]) under
    ``rule``: ``strict`` (above / below every threshold) or ``pareto`` (ties count, one strict)."""
    if rule == "strict":
        return (r > upper).all(axis=1), (r < lower).all(axis=1)
    high = (r >= upper).all(axis=1) & (r > upper).any(axis=1)
    return high, (r <= lower).all(axis=1) & (r < lower).any(axis=1)
