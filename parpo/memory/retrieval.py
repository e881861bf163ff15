"""Retrieval for (user, request): ``psgm`` (two steps over the graph), ``flat`` and ``none``.

All three share one interface, ``RETRIEVERS[name](graph, user, query, k) -> [Retrieved]``, so an
ablation swaps the name only. Step 1 (recall, shared by ``psgm`` and ``flat``): the request's
hashed scenario embedding picks the ``seed_scenarios`` nearest scenario nodes; their skills are
scored by cosine and the best ``seeds`` kept. ``flat`` returns the top ``k`` of them. Step 2
(``psgm``): candidates are the seeds, the user's own heaviest skills and the expansion
seed -> user -> skill (``users_per_skill`` x ``skills_per_user`` per seed), each scored

    score = w_similarity * cos(query, skill)
          + w_user       * relevance to the user   (own edge weight / the user's heaviest, else the
                                                    best path: affinity(user, via) * w(via, seed)
                                                    * w(via, skill), each w / via's heaviest)
          + w_complement * (1 - exp(-complement links to the context))
          - w_conflict   * (1 - exp(-conflict links to the context))
          + w_community  * mean over both levels of the context's weight share in its community

where the *context* is the seeds (weighted by cosine) and the user's own skills (by edge
weight), and affinity = cold_affinity + (1 - cold_affinity) * cosine of the two users' skill
weights. ``k`` skills are then picked greedily, each pick's score lowered by ``w_diversity``
times its largest cosine to the skills already picked. Every result carries its reason: the
path that reached it and each score term.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parpo.memory.communities import LEVELS
from parpo.memory.graph import SkillGraph
from parpo.memory.scenario import Query, embed, scenario_tokens, tokens


@dataclass(frozen=True)
class Retrieved:
    """One retrieved skill: its stable id, slot, total score and why it was chosen."""

    skill_id: int
    slot: int
    score: float
    via: str  # "seed", "own" or "expansion"
    path: tuple[str, ...]  # e.g. ("skill:12", "user:7", "skill:40")
    terms: dict[str, float] = field(default_factory=dict)

    def reason(self) -> dict[str, Any]:
        return {"via": self.via, "path": list(self.path), "score": self.score, "terms": dict(self.terms)}


RetrieverFn = Callable[[SkillGraph, int, Query, int], list[Retrieved]]
RETRIEVERS: dict[str, RetrieverFn] = {}


def register(name: str) -> Callable[[RetrieverFn], RetrieverFn]:
    def wrap(fn: RetrieverFn) -> RetrieverFn:
        RETRIEVERS[name] = fn
        return fn

    return wrap


def retrieve(graph: SkillGraph, user: int, query: Query, k: int | None = None) -> list[Retrieved]:
    """The configured retriever (``graph.cfg.retriever``) for dense user index ``user`` (-1: unknown)."""
    return RETRIEVERS[graph.cfg.retriever](graph, user, query, k or graph.cfg.k)


def recall(graph: SkillGraph, query: Query, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 1: ``slots`` [M] and cosines [M] (M <= n) of the best skills of the nearest scenarios,
    best first (ties: lower slot)."""
    cfg = graph.cfg
    if not len(graph):
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    near = graph.scenario_emb @ embed(scenario_tokens(query), cfg.dim)
    picked: list[set[int]] = []
    for sc in np.argsort(-near, kind="stable").tolist():
        if graph.blocks[sc]:
            picked.append(graph.blocks[sc])
            if len(picked) == cfg.seed_scenarios:
                break
    slots = np.fromiter((s for b in picked for s in b), np.int64, sum(len(b) for b in picked))
    sims = graph.skills.emb[slots] @ embed(tokens(query), cfg.dim)
    # a full sort, not a partition: which of several tied skills make the cut must not depend on
    # the blocks' set order (it differs after a reload, and a resumed run must recall the same)
    order = np.lexsort((slots, -sims))[:n]
    return slots[order], sims[order]


def _hit(
    slot: int, graph: SkillGraph, score: float, via: str, path: tuple[str, ...], terms: dict[str, float]
) -> Retrieved:
    return Retrieved(int(graph.skills.sid[slot]), slot, float(score), via, path, terms)


@register("none")
def no_memory(graph: SkillGraph, user: int, query: Query, k: int) -> list[Retrieved]:
    """The ablation without memory: nothing."""
    return []


@register("flat")
def flat(graph: SkillGraph, user: int, query: Query, k: int) -> list[Retrieved]:
    """Similarity only: the ``k`` best recalled skills (no users, links or communities)."""
    slots, sims = recall(graph, query, k)
    return [
        _hit(s, graph, float(c), "seed", (f"skill:{graph.skills.sid[s]}",), {"similarity": float(c)})
        for s, c in zip(slots.tolist(), sims.tolist(), strict=True)
    ]


def _affinity(
    mine: dict[int, float], norm_mine: float, theirs: list[tuple[int, float]], norm: float
) -> float:
    """Cosine of two users' (capped) skill weights."""
    dot = sum(w * mine.get(s, 0.0) for s, w in theirs)
    return dot / (norm * norm_mine) if norm * norm_mine > 0 else 0.0


def _links(table: dict[int, dict[int, float]], context: set[int], cands: dict[int, int]) -> np.ndarray:
    """[C] 1 - exp(-sum of a candidate's links to the context, itself excluded); ``cands``: slot -> position.
    Walks the context's rows (links are symmetric), far fewer than the candidates'."""
    acc = np.zeros(len(cands))
    for x in context:
        for c, w in table.get(x, {}).items():
            j = cands.get(c)
            if j is not None:
                acc[j] += w
    return 1.0 - np.exp(-acc)


@register("psgm")
def psgm(graph: SkillGraph, user: int, query: Query, k: int) -> list[Retrieved]:
    """Two-step retrieval over the graph (module docstring)."""
    cfg, sk = graph.cfg, graph.skills
    seeds, seed_sims = recall(graph, query, cfg.seeds)
    if not seeds.size:
        return []
    mine_top = graph.top_skills(user, cfg.skills_per_user) if user >= 0 else []
    own = graph.user_skill.get(user, {}) if user >= 0 else {}
    mine = dict(mine_top)
    norm_mine = math.sqrt(sum(w * w for w in mine.values()))
    heaviest = mine_top[0][1] if mine_top else 1.0
    prior = cfg.cold_affinity
    # candidate slot -> (relevance, via, seed, through user); paths are spelt for the picks only
    best: dict[int, tuple[float, str, int, int]] = {s: (0.0, "seed", s, -1) for s in seeds.tolist()}
    for s, _ in mine_top:
        best[s] = (0.0, "own", s, user)
    scale: dict[int, tuple[list[tuple[int, float]], float]] = {}  # other user -> (skills, factor)
    for s in seeds.tolist():
        for via, w_vs in graph.top_users(s, cfg.users_per_skill):
            if via == user:
                continue
            if via not in scale:
                theirs = graph.top_skills(via, cfg.skills_per_user)
                norm = math.sqrt(sum(w * w for _, w in theirs))
                aff = prior + (1.0 - prior) * _affinity(mine, norm_mine, theirs, norm) if mine else prior
                scale[via] = (theirs, aff / theirs[0][1])
            theirs, factor = scale[via]
            base = factor * min(w_vs / theirs[0][1], 1.0)
            for c, w_vc in theirs:
                strength = base * w_vc
                held = best.get(c)
                # the user's own edge outranks any path; otherwise the strongest path is the reason
                if held is None or held[1] != "own" and strength > held[0]:
                    best[c] = (strength, "expansion", s, via)
    cands = np.fromiter(best, np.int64, len(best))
    position = {c: j for j, c in enumerate(best)}
    sim = sk.emb[cands] @ embed(tokens(query), cfg.dim)
    rel = np.fromiter(
        (own[c] / heaviest if c in own else v[0] for c, v in best.items()), np.float64, len(best)
    )
    context = {*seeds.tolist(), *mine}
    comp = _links(graph.complement, context, position)
    conf = _links(graph.conflict, context, position)
    comm = _community(graph, cands, seeds, seed_sims, mine_top, heaviest)
    # the terms as they enter the score (weighted), so a reason's terms add up to its score
    terms = {
        "similarity": cfg.w_similarity * sim,
        "user": cfg.w_user * rel,
        "complement": cfg.w_complement * comp,
        "conflict": -cfg.w_conflict * conf,
        "community": cfg.w_community * comm,
    }
    return _greedy(graph, cands, sum(terms.values()), k, best, terms)


def _path(graph: SkillGraph, slot: int, via: str, seed: int, user: int) -> tuple[str, ...]:
    sid = graph.skills.sid
    if via == "seed":
        return (f"skill:{sid[slot]}",)
    if via == "own":
        return (f"user:{user}", f"skill:{sid[slot]}")
    return (f"skill:{sid[seed]}", f"user:{user}", f"skill:{sid[slot]}")


def _community(
    graph: SkillGraph,
    cands: np.ndarray,
    seeds: np.ndarray,
    seed_sims: np.ndarray,
    mine_top: list[tuple[int, float]],
    heaviest: float,
) -> np.ndarray:
    """[C] mean over levels of the context's weight share in each candidate's community."""
    labels = graph.communities.skill
    size = labels.shape[1]
    ctx = np.concatenate([seeds, np.array([s for s, _ in mine_top], np.int64)])
    w = np.concatenate([np.clip(seed_sims, 0, None), np.array([x / heaviest for _, x in mine_top])])
    out = np.zeros(cands.size)
    total = float(w.sum())
    if total <= 0 or size == 0:
        return out
    for lvl in range(len(LEVELS)):
        lab_ctx = np.where(ctx < size, labels[lvl, np.minimum(ctx, size - 1)], -1)
        lab_c = np.where(cands < size, labels[lvl, np.minimum(cands, size - 1)], -1)
        uniq, inv = np.unique(lab_ctx, return_inverse=True)
        share = np.bincount(inv, weights=w, minlength=uniq.size) / total
        share[uniq < 0] = 0.0  # unlabelled skills share nothing
        pos = np.minimum(np.searchsorted(uniq, lab_c), uniq.size - 1)
        out += np.where(uniq[pos] == lab_c, share[pos], 0.0) / len(LEVELS)
    return out


def _greedy(
    graph: SkillGraph,
    cands: np.ndarray,
    score: np.ndarray,
    k: int,
    best: dict[int, tuple[float, str, int, int]],
    terms: dict[str, np.ndarray],
) -> list[Retrieved]:
    """Pick ``k`` by score minus ``w_diversity`` x the largest cosine to those already picked
    (ties: lower sid)."""
    cfg, sk = graph.cfg, graph.skills
    emb = sk.emb[cands]
    penalty = np.zeros(cands.size)
    taken = np.zeros(cands.size, dtype=bool)
    sids = sk.sid[cands]
    out = []
    for _ in range(min(k, cands.size)):
        gain = np.where(taken, -np.inf, score - penalty)
        ties = np.flatnonzero(gain == gain.max())
        j = int(ties[np.argmin(sids[ties])])
        taken[j] = True
        slot = int(cands[j])
        t = {name: float(v[j]) for name, v in terms.items()}
        t["diversity"] = -float(penalty[j])
        _, via, seed, through = best[slot]
        out.append(_hit(slot, graph, float(gain[j]), via, _path(graph, slot, via, seed, through), t))
        penalty = np.maximum(penalty, cfg.w_diversity * np.clip(emb @ emb[j], 0, None))
    return out
