"""Leiden communities of the skill graph at two resolutions, refreshed incrementally.

The graph Leiden sees is undirected: user-skill ``used`` edges with positive weight and
skill-skill ``complement`` links (conflicts are left out: modularity wants attraction only).
``graspologic-native`` (MIT, a Rust build of Traag et al. 2019's Leiden algorithm) does the
clustering; python-igraph/leidenalg are GPL and stay out of an Apache-2.0 package.

Incremental refresh: between full runs a new skill takes the label carrying the most edge
weight among its labelled users and complement neighbours (a new label when it has none), and
an unlabelled user takes its skills' vote the same way. A full run (both resolutions, seeded)
happens once the edge updates since the last one (a distilled trajectory, a retrieved skill's
edge moved) reach ``min(refresh_every, max(MIN_CHANGES, used edges at the last run))``: early on
the graph is re-clustered each time it doubles, later every ``refresh_every`` updates, so a
run's O(edges) cost is spread over at least as many updates as it has edges, up to the cap.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from parpo.memory.graph import SkillGraph

#: Fewest edge updates that trigger a full run.
MIN_CHANGES = 32
LEVELS = ("coarse", "fine")


def leiden(
    indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray, n: int, resolution: float, seed: int
) -> np.ndarray:
    """[n] int64 community of each node of a symmetric CSR graph (modularity, seeded)."""
    import graspologic_native as gn

    if n == 0 or indices.size == 0:
        return np.arange(n, dtype=np.int64)
    _, part = gn.leiden_csr(
        indptr.astype(np.int64),
        indices.astype(np.int32),
        weights.astype(np.float64),
        n,
        resolution=resolution,
        seed=seed,
    )
    out = np.arange(n, dtype=np.int64)
    out[np.fromiter(part.keys(), np.int64, len(part))] = np.fromiter(part.values(), np.int64, len(part))
    return out


def _csr(g: SkillGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The graph Leiden sees: nodes are skill slots [0, S) then users S + user index."""
    size = g.skills.size
    src, dst, w = [], [], []
    for slot, row in g.skill_user.items():
        for user, weight in row.items():
            if weight > 0:
                src.append(slot)
                dst.append(size + user)
                w.append(weight)
    for a, row in g.complement.items():
        for b, weight in row.items():
            if a < b:
                src.append(a)
                dst.append(b)
                w.append(weight)
    n = size + (max(g.user_skill, default=-1) + 1)
    s, d, ww = np.array(src, np.int64), np.array(dst, np.int64), np.array(w, np.float64)
    rows, cols, vals = np.concatenate([s, d]), np.concatenate([d, s]), np.concatenate([ww, ww])
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, rows + 1, 1)
    return np.cumsum(indptr), cols, vals, n


class Communities:
    """``skill[level, slot]``: community of each live skill (-1: none); ``user[level]``: user -> community."""

    def __init__(self, resolutions: Sequence[float], seed: int) -> None:
        self.resolutions, self.seed = tuple(resolutions), seed
        self.skill = np.full((len(LEVELS), 0), -1, dtype=np.int64)
        self.user: list[dict[int, int]] = [{} for _ in LEVELS]
        self.next_label = [0 for _ in LEVELS]
        self.since_refresh = 0  # edge updates since the last full run
        self.size_at_refresh = 0  # used edges at the last full run
        self.refreshes = 0

    def reserve(self, size: int) -> None:
        """Label columns for at least ``size`` slots (-1: none)."""
        if self.skill.shape[1] < size:
            pad = np.full((len(LEVELS), max(size, 2 * self.skill.shape[1]) - self.skill.shape[1]), -1)
            self.skill = np.concatenate([self.skill, pad], axis=1)

    def refresh(self, g: SkillGraph) -> None:
        """A full Leiden run at both resolutions over the whole graph."""
        indptr, indices, weights, n = _csr(g)
        size = g.skills.size
        self.reserve(size)
        live = g.skills.alive[:size]
        users = np.array(sorted(g.user_skill), dtype=np.int64)
        for lvl, res in enumerate(self.resolutions):
            part = leiden(indptr, indices, weights, n, res, self.seed)
            self.skill[lvl, :size] = np.where(live, part[:size], -1)
            self.user[lvl] = dict(zip(users.tolist(), part[size + users].tolist(), strict=True))
            self.next_label[lvl] = int(part.max(initial=-1)) + 1
        self.since_refresh, self.size_at_refresh = 0, int(indices.size // 2)
        self.refreshes += 1

    def grow(self, g: SkillGraph, new: Sequence[int], changes: int, refresh_every: int) -> None:
        """Label new skills (and their new users) after ``changes`` edge updates: a full run when
        due, else a neighbour vote."""
        self.since_refresh += changes
        if self.since_refresh >= min(refresh_every, max(MIN_CHANGES, self.size_at_refresh)):
            self.refresh(g)
            return
        self.reserve(g.skills.size)
        for slot in new:
            for lvl in range(len(LEVELS)):
                self.skill[lvl, slot] = self._vote(lvl, g, slot)
            for user in g.skill_user.get(slot, {}):
                for lvl in range(len(LEVELS)):
                    if user not in self.user[lvl]:
                        self.user[lvl][user] = int(self.skill[lvl, slot])

    def _vote(self, lvl: int, g: SkillGraph, slot: int) -> int:
        score: dict[int, float] = defaultdict(float)
        # users in index order: a reloaded graph holds the rows in another order, and the float
        # sums must come out the same for a resumed run to label alike
        for user, w in sorted(g.skill_user.get(slot, {}).items()):
            label = self.user[lvl].get(user)
            if label is not None and w > 0:
                score[label] += w
        for other, w in g.complement.get(slot, {}).items():
            label = int(self.skill[lvl, other]) if other < self.skill.shape[1] else -1
            if label >= 0:
                score[label] += w
        if score:
            return max(score.items(), key=lambda kv: (kv[1], -kv[0]))[0]
        self.next_label[lvl] += 1
        return self.next_label[lvl] - 1

    def forget(self, slot: int) -> None:
        if slot < self.skill.shape[1]:
            self.skill[:, slot] = -1

    def metrics(self, g: SkillGraph) -> dict[str, float]:
        """``memory/communities_<level>``: distinct communities among skills that have a user."""
        linked = np.array([s for s in g.skill_user if g.skill_user[s]], dtype=np.int64)
        self.reserve(g.skills.size)
        return {
            f"memory/communities_{name}": float(np.unique(self.skill[lvl, linked]).size if linked.size else 0)
            for lvl, name in enumerate(LEVELS)
        }
