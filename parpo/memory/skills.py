"""``SkillTable``: the skills' attributes in column arrays, one row (*slot*) per skill.

A skill is distilled from high-value trajectories: the plan as a template (call signatures),
argument preferences (strategy, whether it constrains, soft attributes, slate size ``k``), its
scenario and reward statistics (count, sum and sum of squares per component). Slots of evicted
skills are reused; ``sid`` is the skill's stable id (never reused), the one retrieval names.

Eviction rule (``evict``): past ``capacity`` live skills, the skills with the lowest

    utility = support * exp(-(clock - last) / horizon)

go first (ties: older ``last``, then lower ``sid``), where ``support`` adds ``1 + margin`` per
trajectory distilled into the skill and ``last`` is the update that last reinforced it: a
frequency count that forgets skills the policy no longer produces (LFU with ageing).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_GROW = 1024


class SkillTable:
    """Column arrays of ``capacity`` slots (grown as needed); ``alive`` marks used slots."""

    def __init__(self, dim: int, components: Sequence[str]) -> None:
        self.dim, self.components = dim, tuple(components)
        self.next_sid = 0
        self.size = 0  # slots ever used (alive or free)
        self.free: list[int] = []
        c = len(self.components)
        self.emb = np.zeros((0, dim), dtype=np.float32)
        self.sid = np.zeros(0, dtype=np.int64)
        self.scenario = np.zeros(0, dtype=np.int32)
        self.count = np.zeros(0, dtype=np.int64)
        self.support = np.zeros(0, dtype=np.float64)
        self.born = np.zeros(0, dtype=np.int64)
        self.last = np.zeros(0, dtype=np.int64)
        self.rsum = np.zeros((0, c), dtype=np.float64)
        self.rsq = np.zeros((0, c), dtype=np.float64)
        self.alive = np.zeros(0, dtype=bool)
        self.constrained = np.zeros(0, dtype=bool)
        self.k = np.zeros(0, dtype=np.int32)
        self.tokens: list[tuple[str, ...]] = []  # the bag ``emb`` hashes (exact merge check)
        self.plan: list[tuple[str, ...]] = []
        self.strategy: list[str | None] = []
        self.attributes: list[tuple[str, ...]] = []
        self.text: list[str | None] = []

    def __len__(self) -> int:
        """Live skills."""
        return int(self.alive[: self.size].sum())

    def reserve(self, size: int) -> None:
        """At least ``size`` slots (doubling, so appends stay amortised O(1))."""
        if size <= len(self.alive):
            return
        pad = max(_GROW, len(self.alive), size - len(self.alive))
        for name in ("emb", "rsum", "rsq"):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.zeros((pad, a.shape[1]), dtype=a.dtype)]))
        for name in ("sid", "scenario", "count", "support", "born", "last", "alive", "constrained", "k"):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.zeros(pad, dtype=a.dtype)]))
        for name in ("tokens", "plan", "strategy", "attributes", "text"):
            getattr(self, name).extend([None] * pad)

    def add(
        self,
        emb: np.ndarray,
        tokens: tuple[str, ...],
        scenario: int,
        plan: tuple[str, ...],
        strategy: str | None,
        constrained: bool,
        attributes: tuple[str, ...],
        k: int,
        clock: int,
        text: str | None = None,
    ) -> int:
        """A new skill with no trajectory yet (``reinforce`` adds them); returns its slot."""
        if self.free:
            slot = self.free.pop()
        else:
            self.reserve(self.size + 1)
            slot, self.size = self.size, self.size + 1
        self.emb[slot], self.sid[slot], self.scenario[slot] = emb, self.next_sid, scenario
        self.next_sid += 1
        self.count[slot], self.support[slot], self.born[slot], self.last[slot] = 0, 0.0, clock, clock
        self.rsum[slot], self.rsq[slot], self.alive[slot] = 0.0, 0.0, True
        self.constrained[slot], self.k[slot] = constrained, k
        self.plan[slot], self.strategy[slot], self.attributes[slot] = plan, strategy, attributes
        self.text[slot], self.tokens[slot] = text, tokens
        return slot

    def reinforce(self, slot: int, rewards: Sequence[float], margin: float, clock: int) -> None:
        """Fold one distilled trajectory into a skill's statistics."""
        r = np.asarray(rewards, dtype=np.float64)
        self.count[slot] += 1
        self.support[slot] += 1.0 + margin
        self.rsum[slot] += r
        self.rsq[slot] += r * r
        self.last[slot] = clock

    def reward_mean(self, slot: int) -> dict[str, float]:
        n = max(int(self.count[slot]), 1)
        return {c: float(self.rsum[slot, j] / n) for j, c in enumerate(self.components)}

    def live(self) -> np.ndarray:
        """[L] int64 slots of the live skills, ascending."""
        return np.flatnonzero(self.alive[: self.size])

    def evict(self, capacity: int, clock: int, horizon: float) -> np.ndarray:
        """Free the lowest-utility slots beyond ``capacity`` (module docstring); returns them."""
        live = self.live()
        excess = live.size - capacity
        if excess <= 0:
            return np.zeros(0, dtype=np.int64)
        utility = self.support[live] * np.exp(-(clock - self.last[live]) / horizon)
        order = np.lexsort((self.sid[live], self.last[live], utility))
        gone = np.sort(live[order[:excess]])
        self.alive[gone] = False
        self.refree()
        return gone

    def refree(self) -> None:
        """The free list from ``alive``: lowest slot popped first, whatever the order of
        evictions, so a reloaded table (``store``) reuses slots as the saved one would."""
        self.free = np.flatnonzero(~self.alive[: self.size])[::-1].tolist()
