import numpy as np
import pytest

from parpo.memory.config import MemoryConfig
from parpo.memory.graph import SkillGraph
from parpo.memory.scenario import Query
from parpo.memory.trajectory import Trajectory

from .helpers import anchors, traj


def check_invariants(g: SkillGraph) -> None:
    """Every structure of the graph agrees with every other."""
    sk = g.skills
    live = set(sk.live().tolist())
    assert set(g.sid_slot.values()) == live
    assert all(int(sk.sid[s]) == sid for sid, s in g.sid_slot.items())
    assert set().union(*g.blocks.values()) == live
    assert all(int(sk.scenario[s]) == sc for sc, b in g.blocks.items() for s in b)
    mirrored = {(u, s, w) for u, row in g.user_skill.items() for s, w in row.items()}
    assert mirrored == {(u, s, w) for s, row in g.skill_user.items() for u, w in row.items()}
    assert {s for _, s, _ in mirrored} <= live
    for table in (g.complement, g.conflict):
        for a, row in table.items():
            assert a in live and all(b in live and table[b][a] == w for b, w in row.items())
            assert len(row) <= g.cfg.links_per_skill
    assert set(g.trajectories) == live
    assert all(0 < len(q) <= g.cfg.trajectories_per_skill for q in g.trajectories.values())
    assert len(set(sk.free)) == len(sk.free) and not set(sk.free) & live
    assert np.allclose(np.linalg.norm(sk.emb[sorted(live)], axis=1), 1.0, atol=1e-5)


def test_insert_then_merge_keeps_counts_and_edges():
    g = SkillGraph(MemoryConfig())
    m = g.write([traj("t1", 0, "shoes"), traj("t2", 1, "shoes"), traj("t3", 1, "hats")], anchors=anchors(2))
    assert (m["memory/skills"], m["memory/new"], m["memory/merged"]) == (2, 2, 1)
    check_invariants(g)
    shoes = g.sid_slot[0]
    assert int(g.skills.count[shoes]) == 2
    # both users used the shoes skill with weight 1 + margin, margin = reward 1 - anchor 0
    assert g.skill_user[shoes] == {0: 2.0, 1: 2.0}
    assert list(g.trajectories[shoes]) == [("t1", 0), ("t2", 1)]
    assert g.describe(shoes)["tools"] == ["search", "recommend"]
    assert g.describe(shoes)["scenario"] == "shoes|5"  # floor(log2(51)) = 5


def test_different_plans_do_not_merge():
    g = SkillGraph(MemoryConfig())
    g.write([traj("a", 0, "shoes", "popularity"), traj("b", 0, "shoes", "price_asc")], anchors=anchors(1))
    assert len(g) == 2
    check_invariants(g)


def test_low_rewards_are_not_distilled():
    g = SkillGraph(MemoryConfig())
    m = g.write([traj("a", 0, "shoes", task=0.2, pref=0.9)], anchors=anchors(1, mean=0.5))
    assert m["memory/skills"] == 0 and not g.user_skill


def test_links_follow_retrieved_skills_and_stay_symmetric():
    g = SkillGraph(MemoryConfig())
    g.write([traj("a", 0, "x"), traj("b", 0, "y"), traj("c", 0, "z")], anchors=anchors(2))
    x, y, z = (g.sid_slot[i] for i in range(3))
    # a high-value trajectory that retrieved skills 0 and 1 links them (and its own new skill)
    g.write([traj("d", 1, "w")], anchors=anchors(2), used=[[0, 1]])
    w = g.sid_slot[3]
    assert g.complement[x] == {y: 1.0, w: 1.0} and g.complement[w] == {x: 1.0, y: 1.0}
    # a low-value one (every reward below the anchor) that retrieved 1 and 2 marks a conflict,
    # and lowers its user's edges by the margin to the anchor: (0 - 0.5 + 0.2 - 0.5) / 2
    g.write([traj("e", 1, "v", task=0.0, pref=0.2)], anchors=anchors(2, mean=0.5), used=[[1, 2]])
    assert g.conflict[y] == {z: 1.0}
    assert g.user_skill[1][z] == pytest.approx(-0.4)
    assert g.top_users(z, 8) == [(0, 2.0)]  # negative edges are not followed
    check_invariants(g)


def test_eviction_drops_the_lowest_utility_skill_and_its_edges():
    cfg = MemoryConfig(capacity=2, eviction_horizon=1.0)
    g = SkillGraph(cfg)
    g.write([traj("a", 0, "x"), traj("a2", 0, "x")], anchors=anchors(1))  # clock 1: x supported twice
    g.write([traj("b", 0, "y")], anchors=anchors(1))  # clock 2
    g.write([traj("c", 0, "z", pref=2.0)], anchors=anchors(1))  # clock 3: support 1 + 1.5
    # utilities at clock 3: x 4 e^-2 = 0.54, y 2 e^-1 = 0.74, z 2.5
    assert sorted(g.sid_slot) == [1, 2] and g.totals["evicted"] == 1
    assert 0 not in g.skill_user.get(0, {}) and len(g.user_skill[0]) == 2
    check_invariants(g)
    assert g.skills.support[g.sid_slot[2]] == pytest.approx(2.5)
    # clock 4: y 2 e^-2 = 0.27, z 2.5 e^-1 = 0.92, w 3: y goes; the freed slot is reused, the sid is not
    g.write([traj("d", 0, "w", pref=3.0)], anchors=anchors(1))
    assert g.sid_slot[3] == 0 and sorted(g.skills.live().tolist()) == [0, 2]
    assert sorted(g.sid_slot) == [2, 3]
    check_invariants(g)


def test_random_writes_keep_every_invariant():
    rng = np.random.default_rng(3)
    g = SkillGraph(MemoryConfig(capacity=20, refresh_every=25, links_per_skill=4, top_quantile=0.5))
    for update in range(12):
        batch, used = [], []
        for i in range(30):
            u = int(rng.integers(0, 15))
            strat = ["popularity", "recency", "price_asc"][int(rng.integers(0, 3))]
            batch.append(traj(f"{update}/{i}", u, f"c{rng.integers(0, 12)}", strat, *rng.random(2)))
            used.append(rng.choice(max(g.skills.next_sid, 1), size=min(3, g.skills.next_sid), replace=False))
        g.write(batch, used=[[int(s) for s in u] for u in used])
        check_invariants(g)
        assert len(g) <= 20
    assert g.totals["merged"] > 0 and g.totals["evicted"] > 0
    assert sum(g.skills.count[g.skills.live()]) <= g.totals["distilled"]


def test_a_hash_collision_does_not_merge_different_skills():
    # at dim 16 the tokens attr:a0 and attr:a9 hash to the same slot with the same sign: the two
    # skills' embeddings are identical (cosine 1), their token bags differ in one of 7 (6/7)
    g = SkillGraph(MemoryConfig(dim=16))
    batch = [
        Trajectory(f"t{i}", 0, Query("shoes", 50.0, (a,)), ("search:popularity", "recommend"), "popularity",
                   False, (), 10, {"task_quality": 1.0, "preference": 1.0})
        for i, a in enumerate(["a0", "a9"])
    ]  # fmt: skip
    g.write(batch, anchors=anchors(1))
    e0, e9 = g.skills.emb[g.sid_slot[0]], g.skills.emb[g.sid_slot[1]]
    assert float(e0 @ e9) == pytest.approx(1.0)
    assert len(g) == 2 and g.totals["merged"] == 0
    check_invariants(g)
