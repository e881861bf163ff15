"""``step_until_done``: run a batch of episodes to their end, one batched ``act`` per step.

The one episode loop behind training rollouts (``parpo.trainer.rollout.collect``) and
evaluation (``parpo.env.evaluate.run_episodes``): reset on the tasks, then while any episode
is running, ask ``act`` for the running episodes' actions, step the environment, and yield
the step (who acted, this step's rewards, who ended). Callers accumulate what they need.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from parpo.env.environment import BatchEnv
from parpo.env.tasks import Task

#: ``act(observations of the running episodes) -> one action each`` (same order).
ActFn = Callable[[list[Any]], Sequence[Any]]


@dataclass
class Step:
    """One environment step of a batch of E episodes, A of which acted."""

    active: np.ndarray  # [A] int64: the episodes that acted, in the order ``act`` saw them
    rewards: dict[str, np.ndarray]  # component -> [E] float: this step's rewards (0 for the others)
    terminated: np.ndarray  # [E] bool
    truncated: np.ndarray  # [E] bool
    infos: list[dict[str, Any]]  # [E] the environment's info (final for episodes that ended)

    @property
    def ended(self) -> np.ndarray:
        """[A] bool: which of ``active`` ended at this step (terminated or truncated)."""
        return (self.terminated | self.truncated)[self.active]


def step_until_done(env: BatchEnv, tasks: Sequence[Task], act: ActFn) -> Iterator[Step]:
    """Yield every step of one episode per task until all have ended."""
    n = len(tasks)
    obs = env.reset(tasks)
    active = np.arange(n)
    while active.size:
        actions = act([obs[i] for i in active])
        full: list[Any] = [None] * n
        for i, a in zip(active.tolist(), actions, strict=True):
            full[i] = a
        obs, rewards, term, trunc, infos = env.step(full)
        step = Step(active, rewards, np.asarray(term, bool), np.asarray(trunc, bool), infos)
        yield step
        active = active[~step.ended]
