"""Small builders shared by the memory tests."""

from __future__ import annotations

import numpy as np

from parpo.memory.scenario import Query
from parpo.memory.trajectory import Trajectory


def traj(
    tid: str,
    user: int,
    category: str | None,
    strategy: str = "popularity",
    task: float = 1.0,
    pref: float = 1.0,
    price: float | None = 50.0,
    k: int = 10,
) -> Trajectory:
    return Trajectory(
        tid,
        user,
        Query(category, price),
        (f"search:{strategy}", "recommend"),
        strategy,
        False,
        (),
        k,
        {"task_quality": task, "preference": pref},
    )


def anchors(n_users: int, mean: float = 0.0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every user anchored at ``mean`` for both components (rewards above it are high-value)."""
    m, c = np.full(n_users, mean), np.ones(n_users, dtype=np.int64)
    return {"task_quality": (m, c), "preference": (m, c)}
