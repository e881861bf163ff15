"""``SkillGraph``: the typed weighted graph of users, skills, tools, scenarios and trajectories.

Nodes and edges (docs/memory.md has the picture):

    user   -used->       skill     weight: sum of (1 + margin) per distilled trajectory, + margin
                                   per trajectory the skill was retrieved into (margin relative to
                                   the user's anchor, ``trajectory.judge``; may go negative)
    skill  -uses->       tool      the tools of the skill's plan (``tools``)
    skill  -applies to-> scenario  one per skill (category or request kind, price band)
    traj   -distilled->  skill     the latest ``trajectories_per_skill`` sources, with their user
    user   -produced->   traj      (the trajectory's user)
    skill  -complements- skill     +1 per high-value trajectory the two were retrieved into together
    skill  -conflicts-   skill     +1 per low-value one (every reward below its threshold)

Users are dense user indices (the id maps'); skills are slots of ``SkillTable`` named by their
stable ``sid``. ``write`` is the only mutator besides ``refresh``: distil, merge, link, evict,
then label new skills' communities (``communities``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from parpo.memory.communities import Communities
from parpo.memory.config import MemoryConfig
from parpo.memory.scenario import (
    Query,
    bag_cosine,
    embed,
    plan_tokens,
    price_band,
    scenario_tokens,
    tokens,
)
from parpo.memory.skills import SkillTable
from parpo.memory.trajectory import AnchorArrays, Trajectory, judge

#: The reward components a skill keeps statistics of (the environment's names).
COMPONENTS = ("task_quality", "preference")
#: Skills retrieved into one trajectory that are linked pairwise (bounds the quadratic pairs).
MAX_LINKED = 8


def skill_tokens(query: Query, plan: Sequence[str], strategy: str | None, k: int) -> tuple[str, ...]:
    """A skill's scenario and plan tokens."""
    return (*tokens(query), *plan_tokens(plan, strategy, k))


def skill_embedding(query: Query, plan: Sequence[str], strategy: str | None, k: int, dim: int) -> np.ndarray:
    """[dim] the hashed bag of a skill's scenario and plan tokens."""
    return embed(skill_tokens(query, plan, strategy, k), dim)


def _step_text(signature: str) -> str:
    """One plan step in words: ``search:price_asc+c`` -> ``search by price_asc with constraints``."""
    tool, _, rest = signature.partition(":")
    if tool != "search" or not rest:
        return tool
    strategy, _, c = rest.partition("+")
    return f"search by {strategy}" + (" with constraints" if c else "")


def skill_text(
    query: Query, plan: Sequence[str], constrained: bool, attributes: Sequence[str], k: int
) -> str:
    """A skill's short text (what an LLM prompt shows), rendered from its scenario, plan template
    and argument preferences; e.g. ``for shoes, price cap 63-127: search by price_asc with
    constraints, then recommend; constrains; attributes red; slate of 10``."""
    band = price_band(query.price_max)
    where = query.category if query.category is not None else f"any category ({query.kind} request)"
    cap = "no price cap" if band < 0 else f"price cap {2**band - 1}-{2 ** (band + 1) - 1}"
    prefs = ["constrains" if constrained else "no constraints"]
    if attributes:
        prefs.append("attributes " + ", ".join(attributes))
    steps = ", then ".join(_step_text(s) for s in plan) or "no call"
    return f"for {where}, {cap}: {steps}; {'; '.join(prefs)}; slate of {k}"


class SkillGraph:
    """The memory's state; ``parpo.memory.retrieval`` reads it, ``parpo.memory.store`` saves it."""

    def __init__(self, cfg: MemoryConfig, components: Sequence[str] = COMPONENTS) -> None:
        self.cfg = cfg
        self.skills = SkillTable(cfg.dim, components)
        self.scenarios: list[Query] = []
        self.scenario_index: dict[str, int] = {}
        self.scenario_emb = np.zeros((0, cfg.dim), dtype=np.float32)
        self.blocks: dict[int, set[int]] = {}  # scenario -> live slots
        self.user_skill: dict[int, dict[int, float]] = {}
        self.skill_user: dict[int, dict[int, float]] = {}
        self.complement: dict[int, dict[int, float]] = {}
        self.conflict: dict[int, dict[int, float]] = {}
        self.trajectories: dict[int, deque[tuple[str, int]]] = {}
        self.sid_slot: dict[int, int] = {}
        self.communities = Communities(cfg.resolutions, cfg.seed)
        self.clock = 0  # write() calls so far (training updates)
        self.totals = {"distilled": 0, "merged": 0, "evicted": 0}
        self._top: dict[tuple[str, int], list[tuple[int, float]]] = {}  # fan-out cache

    # -- reading ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.skills)

    def tools(self, slot: int) -> list[str]:
        """The tools a skill's plan calls (``search``, ``filter``, ``recommend``), in plan order."""
        return list(dict.fromkeys(s.split(":")[0] for s in self.skills.plan[slot] if s != "invalid"))

    def top_users(self, slot: int, n: int) -> list[tuple[int, float]]:
        """The ``n`` heaviest positive ``used`` edges into a skill: (user, weight), heaviest first."""
        return self._cached("u", slot, self.skill_user, n)

    def top_skills(self, user: int, n: int) -> list[tuple[int, float]]:
        """The ``n`` heaviest positive ``used`` edges of a user: (slot, weight), heaviest first."""
        return self._cached("s", user, self.user_skill, n)

    def _cached(
        self, kind: str, key: int, table: dict[int, dict[int, float]], n: int
    ) -> list[tuple[int, float]]:
        hit = self._top.get((kind, key))
        if hit is None or len(hit) < n and len(hit) < len(table.get(key, ())):
            row = table.get(key, {})
            hit = sorted(((k, w) for k, w in row.items() if w > 0), key=lambda kw: (-kw[1], kw[0]))[
                : max(n, 16)
            ]
            self._top[(kind, key)] = hit
        return hit[:n]

    # -- writing ------------------------------------------------------------------------------
    def scenario(self, query: Query) -> int:
        """The scenario node of a query (created when new)."""
        key = query.key
        sc = self.scenario_index.get(key)
        if sc is None:
            sc = self.scenario_index[key] = len(self.scenarios)
            self.scenarios.append(query)  # the first query names the node (its kind survives a reload)
            e = embed(scenario_tokens(query), self.cfg.dim)
            self.scenario_emb = np.vstack([self.scenario_emb, e[None]])
            self.blocks[sc] = set()
        return sc

    def nearest(self, emb: np.ndarray, scenario: int) -> tuple[int, float]:
        """The live skill of ``scenario`` most similar to ``emb`` (slot, cosine); (-1, 0) if none."""
        block = self.blocks.get(scenario)
        if not block:
            return -1, 0.0
        slots = np.fromiter(sorted(block), dtype=np.int64, count=len(block))  # ties: lower slot
        sims = self.skills.emb[slots] @ emb
        j = int(np.argmax(sims))
        return int(slots[j]), float(sims[j])

    def _edge(self, user: int, slot: int, w: float) -> None:
        if user < 0:
            return
        row = self.user_skill.setdefault(user, {})
        row[slot] = row.get(slot, 0.0) + w
        self.skill_user.setdefault(slot, {})[user] = row[slot]
        self._top.pop(("s", user), None)
        self._top.pop(("u", slot), None)

    def _link(self, table: dict[int, dict[int, float]], slots: Sequence[int]) -> None:
        """+1 on every pair of ``slots`` (both directions); a full row keeps its links."""
        uniq = sorted(set(slots))[:MAX_LINKED]
        cap = self.cfg.links_per_skill
        for i, a in enumerate(uniq):
            for b in uniq[i + 1 :]:
                ra, rb = table.setdefault(a, {}), table.setdefault(b, {})
                if (b in ra or len(ra) < cap) and (a in rb or len(rb) < cap):
                    ra[b] = rb[a] = ra.get(b, 0.0) + 1.0

    def _distil(self, t: Trajectory, margin: float) -> tuple[int, bool]:
        """Insert or merge one high-value trajectory; (slot, merged). The hashed embedding finds
        the nearest skill of the scenario; the exact token bags decide, so a hash collision
        never merges two different skills."""
        cfg, sk = self.cfg, self.skills
        toks = skill_tokens(t.query, t.plan, t.strategy, t.k)
        emb = embed(toks, cfg.dim)
        sc = self.scenario(t.query)
        slot, sim = self.nearest(emb, sc)
        merged = (
            slot >= 0
            and sim >= cfg.merge_threshold
            and bag_cosine(toks, sk.tokens[slot]) >= cfg.merge_threshold
        )
        if not merged:
            text = skill_text(t.query, t.plan, t.constrained, t.attributes, t.k)
            slot = sk.add(
                emb, toks, sc, t.plan, t.strategy, t.constrained, t.attributes, t.k, self.clock, text
            )
            self.blocks[sc].add(slot)
            self.sid_slot[int(sk.sid[slot])] = slot
            self.trajectories[slot] = deque(maxlen=cfg.trajectories_per_skill)
        sk.reinforce(slot, [t.rewards[c] for c in sk.components], margin, self.clock)
        self.trajectories[slot].append((t.traj_id, t.user))
        self._edge(t.user, slot, 1.0 + margin)
        return slot, merged

    def write(
        self,
        trajectories: Sequence[Trajectory],
        *,
        anchors: Mapping[str, AnchorArrays] | None = None,
        used: Sequence[Sequence[int]] | None = None,
    ) -> dict[str, float]:
        """One update's write-back: distil the high-value trajectories (merging near-duplicates),
        link skills retrieved together (``used[i]``: the sids retrieved into trajectory i), evict
        past capacity and label new skills' communities. Returns metrics (``memory/...``)."""
        self.clock += 1
        cfg, sk = self.cfg, self.skills
        # A retrieved skill's edge moves by the reward relative to the middle of the two
        # thresholds (``centred``): the user's anchor itself when there is one.
        j = judge(trajectories, sk.components, anchors, cfg.top_quantile, cfg.high_value_rule)
        new, merged, changes = [], 0, 0
        for i, t in enumerate(trajectories):
            slots = [self.sid_slot[s] for s in (used[i] if used is not None else ()) if s in self.sid_slot]
            for s in slots:
                self._edge(t.user, s, float(j.centred[i]))
            changes += len(slots) + bool(j.high[i])
            if j.high[i]:
                slot, m = self._distil(t, float(j.margin[i]))
                merged += m
                if not m:
                    new.append(slot)
                self._link(self.complement, [slot, *slots])
            elif j.low[i]:
                self._link(self.conflict, slots)
        gone = sk.evict(cfg.capacity, self.clock, cfg.eviction_horizon)
        for slot in gone.tolist():
            self._forget(slot)
        gone_set = set(gone.tolist())
        new = [s for s in new if s not in gone_set]
        self.totals["distilled"] += int(j.high.sum())
        self.totals["merged"] += merged
        self.totals["evicted"] += int(gone.size)
        self.communities.grow(self, new, changes, cfg.refresh_every)
        return {
            "memory/skills": float(len(sk)),
            "memory/high_value": float(j.high.sum()),
            "memory/new": float(len(new)),
            "memory/merged": float(merged),
            "memory/evicted": float(gone.size),
            "memory/users": float(len(self.user_skill)),
            **self.communities.metrics(self),
        }

    def _forget(self, slot: int) -> None:
        """Drop every edge of an evicted skill."""
        sk = self.skills
        self.blocks[int(sk.scenario[slot])].discard(slot)
        self.sid_slot.pop(int(sk.sid[slot]), None)
        for user in self.skill_user.pop(slot, {}):
            row = self.user_skill[user]
            row.pop(slot, None)
            if not row:
                del self.user_skill[user]
            self._top.pop(("s", user), None)
        for table in (self.complement, self.conflict):
            for other in table.pop(slot, {}):
                table.get(other, {}).pop(slot, None)
        self.trajectories.pop(slot, None)
        self._top.pop(("u", slot), None)
        self.communities.forget(slot)

    def text(self, slot: int) -> str:
        """The skill's short text (``skill_text``; rendered now for a skill saved without one)."""
        sk = self.skills
        if sk.text[slot] is not None:
            return sk.text[slot]
        query = self.scenarios[int(sk.scenario[slot])]  # same category and band as the skill's own
        return skill_text(
            query, sk.plan[slot], bool(sk.constrained[slot]), sk.attributes[slot], int(sk.k[slot])
        )

    def describe(self, slot: int) -> dict[str, Any]:
        """A skill as plain JSON data (what serving names and an LLM prompt shows)."""
        sk = self.skills
        return {
            "skill_id": int(sk.sid[slot]),
            "text": self.text(slot),
            "scenario": self.scenarios[int(sk.scenario[slot])].key,
            "plan": list(sk.plan[slot]),
            "strategy": sk.strategy[slot],
            "constrained": bool(sk.constrained[slot]),
            "attributes": list(sk.attributes[slot]),
            "k": int(sk.k[slot]),
            "count": int(sk.count[slot]),
            "rewards": sk.reward_mean(slot),
            "tools": self.tools(slot),
        }
