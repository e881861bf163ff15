"""``PolicyMemory``: the skill graph as a policy sees it during training and serving.

Per observation it retrieves skills for the episode's (user, request) (cached until the next
write, so the G rollouts and every step of a task share one retrieval) and encodes them as
``SKILL_FEATURES`` rows, the native policy's extra tokens. After a training update,
``write_back`` distils the update's episodes (every rank's, in rank order, so the graph stays
identical on every rank) and returns the trainer's metrics.

Skill token features (``SKILL_FEATURES``, [M, 12] per observation): the plan's search strategy
(one-hot over ``STRATEGIES``; all zero without a search), whether it constrained, whether it
filtered, its slate size / 10, its mean task quality and preference, and the retrieval's
similarity and user terms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from parpo.env.cache import BoundedCache
from parpo.env.schema import STRATEGIES
from parpo.env.tasks import Task
from parpo.memory.graph import SkillGraph
from parpo.memory.retrieval import Retrieved, retrieve
from parpo.memory.scenario import Query
from parpo.memory.trajectory import AnchorArrays, Trajectory, from_episode

if TYPE_CHECKING:
    from pathlib import Path

SKILL_FEATURES: tuple[str, ...] = (
    *(f"strategy:{s}" for s in STRATEGIES),
    "constrained",
    "filters",
    "k/10",
    "task_quality",
    "preference",
    "similarity",
    "user",
)
#: Retrievals cached between writes (serving never writes: this bounds its cache).
CACHE_LIMIT = 100_000

#: ``gather(local items) -> every rank's items in rank order`` (identity on one process).
Gather = Callable[[list[Any]], list[Any]]


def skill_row(graph: SkillGraph, hit: Retrieved) -> np.ndarray:
    """[len(SKILL_FEATURES)] float32 of one retrieved skill (module docstring)."""
    sk, slot = graph.skills, hit.slot
    row = np.zeros(len(SKILL_FEATURES), dtype=np.float32)
    if sk.strategy[slot] in STRATEGIES:
        row[STRATEGIES.index(sk.strategy[slot])] = 1.0
    n = len(STRATEGIES)
    means = sk.reward_mean(slot)
    row[n:] = (
        float(sk.constrained[slot]),
        float("filter" in sk.plan[slot]),
        sk.k[slot] / 10.0,
        means.get("task_quality", 0.0),
        means.get("preference", 0.0),
        hit.terms.get("similarity", 0.0),
        hit.terms.get("user", 0.0),
    )
    return row


class PolicyMemory:
    """``graph`` with the id map's ``user_index`` (external user id -> dense index)."""

    def __init__(self, graph: SkillGraph, user_index: Mapping[str, int]) -> None:
        self.graph, self.user_index = graph, user_index
        self._cache: BoundedCache[tuple[str, Query], list[Retrieved]] = BoundedCache(CACHE_LIMIT)
        self.lookups, self.found = 0, 0  # retrievals since the last write, and those with a skill

    def retrieved(self, tasks: Sequence[Task]) -> list[list[Retrieved]]:
        """The skills retrieved for each task's (user, request)."""
        keys = [(t.user_id, Query.of(t.request)) for t in tasks]

        def compute(todo: list[tuple[str, Query]]) -> list[list[Retrieved]]:
            out = [retrieve(self.graph, self.user_index.get(u, -1), q) for u, q in todo]
            self.lookups += len(out)
            self.found += sum(bool(hits) for hits in out)
            return out

        return self._cache.lookup(keys, compute)

    def shown(self, tasks: Sequence[Task], m: int) -> list[list[Retrieved]]:
        """The first ``m`` skills retrieved for each task: what a policy showing ``m`` skills
        sees (the native policy's tokens, the LLM's prompt) and what serving names."""
        return [hits[:m] for hits in self.retrieved(tasks)]

    def named(self, hits: Sequence[Retrieved]) -> list[dict[str, Any]]:
        """``hits`` as ``/v1/act`` names them (``serving.schemas.SkillRef``): id, scenario node,
        plan template and the reason it was retrieved."""
        g = self.graph
        return [
            {"skill_id": h.skill_id, "scenario": g.scenarios[int(g.skills.scenario[h.slot])].key,
             "plan": list(g.skills.plan[h.slot]), "reason": h.reason()}
            for h in hits
        ]  # fmt: skip

    def encode(self, tasks: Sequence[Task], m: int) -> tuple[np.ndarray, np.ndarray]:
        """``skills`` [B, m, F] float32 and ``skill_mask`` [B, m] bool for B observations' tasks."""
        feats = np.zeros((len(tasks), m, len(SKILL_FEATURES)), dtype=np.float32)
        mask = np.zeros((len(tasks), m), dtype=bool)
        for i, hits in enumerate(self.shown(tasks, m)):
            for j, hit in enumerate(hits):
                feats[i, j] = skill_row(self.graph, hit)
                mask[i, j] = True
        return feats, mask

    def write_back(
        self,
        update: int,
        episodes: Sequence[Any],
        infos: Sequence[Mapping[str, Any]],
        user: Sequence[int],
        preference: Sequence[float],
        anchors: Mapping[str, AnchorArrays] | None,
        gather: Gather | None = None,
    ) -> dict[str, float]:
        """Distil one update's episodes (``BatchEnv.episodes``: task and calls) with their final
        ``infos``, user indices and preference rewards; ``gather`` joins every rank's first.
        Returns ``memory/*`` metrics, the retrieval hit rate since the last write included."""
        local = []
        used = self.retrieved([e.task for e in episodes])
        for i, (e, info) in enumerate(zip(episodes, infos, strict=True)):
            rewards = {
                "task_quality": float(info.get("task_quality", 0.0)),
                "preference": float(preference[i]),
            }
            t = from_episode(f"{update}/{e.task.task_id}/{i}", int(user[i]), e.task, e.history,
                             len(info.get("slate", [])), rewards)  # fmt: skip
            local.append((t, [h.skill_id for h in used[i]]))
        every: list[tuple[Trajectory, list[int]]] = gather(local) if gather is not None else local
        hit_rate = self.found / self.lookups if self.lookups else 0.0
        metrics = self.graph.write([t for t, _ in every], anchors=anchors, used=[u for _, u in every])
        self._cache = BoundedCache(CACHE_LIMIT)  # the graph changed: retrieve afresh
        self.lookups, self.found = 0, 0
        return {**metrics, "memory/hit_rate": hit_rate}


#: The skill memory's folder inside a saved policy or a training run (``parpo.memory.store``).
MEMORY = "memory"


def user_ids(user_index: Mapping[str, int]) -> list[str]:
    """The user id map in index order (the memory's users are its indices)."""
    return sorted(user_index, key=user_index.__getitem__)


def save_policy_memory(memory: PolicyMemory, folder: Path) -> None:
    """``memory``'s graph as ``parpo.memory.store`` tables in ``folder``, on its user map."""
    from parpo.memory.store import save

    save(memory.graph, folder, user_ids(memory.user_index))


def load_policy_memory(folder: Path, user_index: Mapping[str, int]) -> PolicyMemory:
    """The memory saved in ``folder`` (``save_policy_memory``), read on the reward model's
    ``user_index`` (which may extend the saved one)."""
    from parpo.memory.store import load

    return PolicyMemory(load(folder, user_ids(user_index)), user_index)
