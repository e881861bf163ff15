"""The tasks an evaluation runs: a fixed-size, hash-stable sample of each task set.

A task is kept when its key ``sha256(seed/user/target)`` is among the ``n`` smallest of its set,
so the sample depends only on the tasks themselves: the policy and every reference agent see
the same tasks, so do two policy versions trained on the same data and split (paired
comparisons and add-only evals stay valid), and data that grows keeps most of its old sample
(a new task enters only by displacing the one with the largest key). A set of at most ``n``
tasks is kept whole and in order, so small evaluations are exactly the full ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from pydantic import Field

from parpo.env.tasks import Task
from parpo_core.config import StrictModel


class EvalSample(StrictModel):
    """Sample sizes per task set (None: every task) and the seed of the keys and the bootstrap."""

    warm: int | None = Field(2000, ge=1, description="warm (test) tasks evaluated; None: all")
    cold: int | None = Field(2000, ge=1, description="cold (cold_test) tasks evaluated; None: all")
    plan_selection: int | None = Field(
        5000, ge=1, description="training tasks the fixed-plan reference is selected on; None: all"
    )
    seed: int = Field(0, description="seeds the sample keys and the bootstrap resamples")
    n_boot: int = Field(1000, ge=2, description="bootstrap resamples (of tasks) behind each interval")

    @classmethod
    def full(cls, **kw: int) -> EvalSample:
        """Every task of every set (full evaluation)."""
        return cls(warm=None, cold=None, plan_selection=None, **kw)


def _key(seed: int, t: Task) -> bytes:
    return hashlib.sha256(f"{seed}/{t.user_id}/{t.target}".encode()).digest()


def sample_tasks(tasks: Sequence[Task], n: int | None, seed: int = 0) -> list[Task]:
    """The ``n`` tasks [<= n] with the smallest keys, in their original order; all of them when
    ``n`` is None or there are at most ``n``. Ties (a user with one target twice) break by order."""
    if n is None or len(tasks) <= n:
        return list(tasks)
    keep = sorted(range(len(tasks)), key=lambda i: (_key(seed, tasks[i]), i))[:n]
    return [tasks[i] for i in sorted(keep)]
