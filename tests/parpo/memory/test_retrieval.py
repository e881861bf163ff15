import math

import numpy as np
import pytest

from parpo.memory.config import MemoryConfig
from parpo.memory.graph import SkillGraph, skill_embedding
from parpo.memory.retrieval import RETRIEVERS, retrieve
from parpo.memory.scenario import Query, embed, tokens

from .helpers import anchors, traj

SHOES = Query("shoes", 50.0)


def two_skills(**cfg) -> SkillGraph:
    """User 0 used skill 0 (shoes, popularity) and skill 1 (hats, recency), each with weight 2."""
    g = SkillGraph(MemoryConfig(seeds=1, k=2, **cfg))
    g.write([traj("a", 0, "shoes"), traj("b", 0, "hats", "recency")], anchors=anchors(3))
    return g


def test_expansion_reaches_a_skill_recall_missed_and_says_how():
    g = two_skills(w_community=0.0)
    got = retrieve(g, 1, SHOES)  # user 1 has no history: affinity is the cold prior 0.5
    assert [r.skill_id for r in got] == [0, 1]
    seed, hop = got
    assert seed.via == "expansion" and seed.path == ("skill:0", "user:0", "skill:0")
    assert hop.via == "expansion" and hop.path == ("skill:0", "user:0", "skill:1")
    q = embed(tokens(SHOES), g.cfg.dim)
    hats = skill_embedding(Query("hats", 50.0), ("search:recency", "recommend"), "recency", 10, g.cfg.dim)
    shoes = g.skills.emb[g.sid_slot[0]]
    assert hop.terms["similarity"] == pytest.approx(float(hats @ q))
    assert hop.terms["user"] == pytest.approx(0.5 * 1.0 * 1.0)  # prior x w(0, seed)/2 x w(0, hat)/2
    assert hop.terms["diversity"] == pytest.approx(-0.5 * max(float(hats @ shoes), 0.0))
    for r in got:
        assert r.score == pytest.approx(sum(r.terms.values()))
        assert r.reason()["path"][-1] == f"skill:{r.skill_id}"


def test_the_users_own_skills_come_first_with_full_relevance():
    got = retrieve(two_skills(), 0, SHOES)
    assert {r.via for r in got} == {"own"} and all(r.path[0] == "user:0" for r in got)
    assert [r.terms["user"] for r in got] == [1.0, 1.0]


def test_conflict_with_the_context_costs_and_complement_pays():
    g = two_skills(w_community=0.0)
    before = {r.skill_id: r for r in retrieve(g, 1, SHOES)}
    # user 2 retrieved both skills into a trajectory with every reward below its anchor
    g.write([traj("c", 2, "socks", task=0.0, pref=0.0)], anchors=anchors(3, mean=0.5), used=[[0, 1]])
    after = {r.skill_id: r for r in retrieve(g, 1, SHOES)}
    assert after[1].terms["conflict"] == pytest.approx(-0.5 * (1 - math.exp(-1)))
    assert after[1].score == pytest.approx(before[1].score + after[1].terms["conflict"])
    g.write([traj("d", 2, "socks")], anchors=anchors(3), used=[[0, 1]])
    assert retrieve(g, 1, SHOES)[1].terms["complement"] == pytest.approx(0.3 * (1 - math.exp(-1)))


def test_flat_is_similarity_only_and_none_is_empty():
    g = two_skills()
    flat = RETRIEVERS["flat"](g, 1, SHOES, 2)
    sims = [r.terms["similarity"] for r in flat]
    assert sims == sorted(sims, reverse=True) and [r.score for r in flat] == sims
    assert all(r.via == "seed" and set(r.terms) == {"similarity"} for r in flat)
    assert RETRIEVERS["none"](g, 1, SHOES, 2) == []
    assert retrieve(SkillGraph(MemoryConfig()), 0, SHOES) == []


def test_retrieval_is_deterministic_and_results_are_distinct():
    rng = np.random.default_rng(0)
    g = SkillGraph(MemoryConfig(k=6, top_quantile=0.5))
    for update in range(5):
        g.write(
            [
                traj(
                    f"{update}/{i}",
                    int(rng.integers(0, 20)),
                    f"c{rng.integers(0, 5)}",
                    ["popularity", "recency"][i % 2],
                    *rng.random(2),
                )
                for i in range(60)
            ]
        )
    for user in (-1, 0, 5):
        got = retrieve(g, user, Query("c1", 30.0))
        assert len({r.skill_id for r in got}) == len(got) == 6
        assert [r.reason() for r in got] == [r.reason() for r in retrieve(g, user, Query("c1", 30.0))]
