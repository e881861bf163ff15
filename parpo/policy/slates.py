"""N sampled slates of a request: what Monte-Carlo propensities are counted from.

``Policy.sample_slates(env, tasks, n)`` returns one ``SlateDraws`` per task: ``n`` independent
episodes of the task at the policy's temperature, draw 0 being the one to serve. The default,
``episode_slates``, runs the ``n`` episodes one by one through the environment (every backend
can); the native backend samples a plan tree instead (``parpo.policy.plan_tree``: the same
distribution, each distinct plan's environment steps run once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from parpo.env.environment import BatchEnv
from parpo.env.episodes import step_until_done
from parpo.env.schema import Filter, Recommend, Search
from parpo.env.tasks import Task

if TYPE_CHECKING:
    from parpo.policy.base import Policy


@dataclass
class SlateDraws:
    """``n`` draws of one task's episode; draw 0 is the served one.

    ``slates`` [n]: item ids (empty where the episode ended without a recommend); ``plans`` [n]:
    plan signatures (``search:popularity>recommend``); ``served_plan``: the typed calls of
    draw 0 (its recommend included); ``distinct_plans``: distinct tool-call sequences among the
    draws (recommended items aside), i.e. how many different environment paths they took.

    ``slot1`` and ``unexplored`` (None where not computed): the exact probability that draw 0's
    first item is first, summed over the distinct plans drawn, and the plan probability those
    plans leave out; the true marginal lies in ``[slot1, slot1 + unexplored]``.
    """

    slates: list[list[str]]
    plans: list[str]
    served_plan: list[Search | Filter | Recommend]
    distinct_plans: int
    slot1: float | None = None
    unexplored: float | None = None


def episode_slates(
    policy: Policy, env: BatchEnv, tasks: Sequence[Task], n: int, *, generator: Any = None
) -> list[SlateDraws]:
    """The default ``sample_slates``: ``n`` whole episodes per task in one batch (task-major),
    the loop the server ran for every backend before the plan tree."""
    if n < 1:
        raise ValueError(f"n must be at least 1 (draw 0 is the served one), got {n}")
    expanded = [t for t in tasks for _ in range(n)]
    infos: list[dict[str, Any]] = [{} for _ in expanded]
    for step in step_until_done(env, expanded, lambda obs: policy.act(obs, generator=generator).actions):
        for i in step.active[step.ended].tolist():
            infos[i] = step.infos[i]
    out = []
    for r in range(len(tasks)):
        idx = range(r * n, (r + 1) * n)
        paths = {
            tuple(repr(c.action) for c in env.episodes[i].history if c.signature != "recommend") for i in idx
        }
        served = [c.action for c in env.episodes[r * n].history if c.action is not None]
        out.append(
            SlateDraws(
                slates=[list(infos[i]["slate"]) for i in idx],
                plans=[infos[i]["plan"] for i in idx],
                served_plan=served,
                distinct_plans=len(paths),
            )
        )
    return out
