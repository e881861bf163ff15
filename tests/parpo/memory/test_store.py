import json

import numpy as np
import pytest

from data_pipelines.idmaps import ids_fingerprint
from parpo.memory.config import MemoryConfig
from parpo.memory.graph import SkillGraph
from parpo.memory.retrieval import retrieve
from parpo.memory.scenario import Query
from parpo.memory.store import load, save
from parpo.memory.trajectory import Trajectory
from parpo_core.errors import DataError

from .helpers import anchors, traj

USERS = [f"u{i}" for i in range(20)]


def batch(rng: np.random.Generator, update: int, sids: list[int]) -> tuple[list, list]:
    trajs = [
        traj(
            f"{update}/{i}",
            int(rng.integers(0, 20)),
            f"c{rng.integers(0, 8)}",
            ["popularity", "recency", "price_asc"][int(rng.integers(0, 3))],
            *rng.random(2),
        )
        for i in range(40)
    ]
    used = [rng.choice(sids, size=min(3, len(sids)), replace=False).tolist() for _ in trajs]
    return trajs, used


def grown(seed: int = 0) -> tuple[SkillGraph, np.random.Generator]:
    rng = np.random.default_rng(seed)
    g = SkillGraph(MemoryConfig(capacity=12, top_quantile=0.5, refresh_every=8))
    # a request without a category: its scenario is named by its kind, which a reload must keep
    g.write([traj("open", 0, None, price=20.0)], anchors=anchors(20))
    g.write([Trajectory("attrs", 1, Query(None, 20.0, ("a1",)), ("search:popularity", "recommend"),
                        "popularity", False, (), 10, {"task_quality": 1.0, "preference": 1.0})], anchors=anchors(20))  # fmt: skip
    assert {"<open>|4", "<attributes>|4"} <= set(g.scenario_index)
    for update in range(6):
        trajs, used = batch(rng, update, sorted(g.sid_slot))
        g.write(trajs, used=used)
    return g, rng


def state(g: SkillGraph) -> dict:
    sk, live = g.skills, g.skills.live()
    return {
        "live": live.tolist(),
        "arrays": [
            getattr(sk, n)[live].tolist()
            for n in ("sid", "scenario", "count", "support", "last", "k", "emb", "rsum", "rsq")
        ],
        "lists": [
            [getattr(sk, n)[s] for s in live] for n in ("tokens", "plan", "strategy", "attributes", "text")
        ],
        "edges": (g.user_skill, g.complement, g.conflict),
        "trajectories": {s: list(q) for s, q in g.trajectories.items()},
        "communities": (g.communities.skill[:, live].tolist(), g.communities.user),
        "counters": (g.clock, g.totals, sk.next_sid, sk.size, sk.free),  # free: in reuse order
        "scenarios": [q.key for q in g.scenarios],
    }


def test_round_trip_keeps_the_graph_and_what_happens_next(tmp_path):
    g, rng = grown()
    assert g.totals["evicted"] > 0 and g.conflict and g.complement
    h = load(save(g, tmp_path / "m", USERS), USERS)
    assert state(h) == state(g)
    queries = [Query(f"c{i}", 20.0 * i) for i in range(4)]
    assert [[r.reason() for r in retrieve(h, u, q)] for u in (-1, 3) for q in queries] == [
        [r.reason() for r in retrieve(g, u, q)] for u in (-1, 3) for q in queries
    ]
    trajs, used = batch(rng, 99, sorted(g.sid_slot))
    assert h.write(trajs, used=used) == g.write(trajs, used=used)
    assert state(h) == state(g)
    files = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert files == [
        "links.parquet",
        "memory.json",
        "scenarios.parquet",
        "skills.parquet",
        "trajectories.parquet",
        "used.parquet",
        "users.parquet",
    ]


def test_a_map_that_extends_the_memorys_loads(tmp_path):
    g, _ = grown()
    h = load(save(g, tmp_path / "m", USERS), [*USERS, "new-user"])
    assert state(h) == state(g)


def test_another_id_map_fails_in_one_line_naming_both_fingerprints(tmp_path):
    g, _ = grown()
    save(g, tmp_path / "m", USERS)
    other = ["x", *USERS[1:]]
    with pytest.raises(DataError) as e:
        load(tmp_path / "m", other)
    msg = str(e.value)
    assert "\n" not in msg
    assert ids_fingerprint(USERS)[:12] in msg and ids_fingerprint(other)[:12] in msg
    with pytest.raises(DataError, match="20 users"):
        load(tmp_path / "m", USERS[:10])  # shorter: the memory names users the map lacks


def test_a_newer_format_fails_in_one_line(tmp_path):
    g, _ = grown()
    d = save(g, tmp_path / "m", USERS)
    meta = json.loads((d / "memory.json").read_text())
    (d / "memory.json").write_text(json.dumps({**meta, "format_version": 99}))
    with pytest.raises(DataError, match="memory format version 99; this version of parpo reads 1"):
        load(d, USERS)
    with pytest.raises(DataError, match="not a saved memory"):
        load(tmp_path, USERS)


def test_a_memory_saved_before_the_rule_option_keeps_the_strict_rule(tmp_path):
    g, _ = grown()
    assert g.cfg.high_value_rule == "pareto"  # today's default
    d = save(g, tmp_path / "m", USERS)
    assert load(d, USERS).cfg.high_value_rule == "pareto"
    meta = json.loads((d / "memory.json").read_text())
    del meta["config"]["high_value_rule"]  # as format 1 was written before the option
    (d / "memory.json").write_text(json.dumps(meta))
    old = load(d, USERS)
    assert old.cfg.high_value_rule == "strict"
    # it goes on distilling under strict: a saturated task quality blocks every trajectory
    batch = [traj(f"t{i}", i, "c0", task=1.0, pref=p) for i, p in enumerate([0.1, 0.5, 0.9, 0.95, 0.99])]
    assert old.write(batch)["memory/high_value"] == 0.0
    # pareto: task quality ties its quantile (1.0); preference above its median 0.9: 0.95, 0.99
    assert load(save(g, tmp_path / "n", USERS), USERS).write(batch)["memory/high_value"] == 2.0
