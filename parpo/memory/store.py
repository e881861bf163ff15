"""Saving and loading a ``SkillGraph``: parquet tables and one JSON file, no pickles.

    memory.json            format version, config, counters, the user id map's fingerprint
    skills.parquet         one row per live skill: slot, sid, scenario, plan, arguments, reward
                           statistics, embedding, communities
    scenarios.parquet      scenario nodes (id, category, price cap)
    used.parquet           user -used-> skill edges (user, slot, weight)
    links.parquet          complement / conflict links (kind, a, b, weight), both directions
    trajectories.parquet   traj -distilled-> skill (slot, position, traj_id, user)
    users.parquet          users' communities (user, coarse, fine)

Users are dense indices into the user id map the memory was built on. ``load`` checks the
loader's id map against it: the same map, or one that extends it (retraining appends users),
loads; any other fails with one line naming both fingerprints.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from data_pipelines.idmaps import ids_fingerprint
from parpo.memory.config import MemoryConfig
from parpo.memory.graph import SkillGraph
from parpo.memory.scenario import Query
from parpo_core.errors import DataError

#: Bumped whenever a table or a field changes meaning.
FORMAT_VERSION = 1
META = "memory.json"


def _fp(user_ids: Sequence[str]) -> str:
    return ids_fingerprint(list(user_ids))


def save(graph: SkillGraph, directory: str | Path, user_ids: Sequence[str]) -> Path:
    """Write ``graph`` into ``directory`` (created); ``user_ids``: the id map in index order."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    sk, com = graph.skills, graph.communities
    top_user = max(graph.user_skill, default=-1)
    if top_user >= len(user_ids):
        raise ValueError(f"memory holds user index {top_user} but the id map has {len(user_ids)} users")
    live = sk.live()
    com.reserve(sk.size)
    cols: dict[str, object] = {
        "slot": live,
        "sid": sk.sid[live],
        "scenario": sk.scenario[live],
        "count": sk.count[live],
        "support": sk.support[live],
        "born": sk.born[live],
        "last": sk.last[live],
        "constrained": sk.constrained[live],
        "k": sk.k[live],
        "tokens": [list(sk.tokens[s]) for s in live],
        "plan": [list(sk.plan[s]) for s in live],
        "strategy": [sk.strategy[s] for s in live],
        "attributes": [list(sk.attributes[s]) for s in live],
        "text": [sk.text[s] for s in live],
        "coarse": com.skill[0, live],
        "fine": com.skill[1, live],
    }
    for j, c in enumerate(sk.components):
        cols[f"sum_{c}"], cols[f"sq_{c}"] = sk.rsum[live, j], sk.rsq[live, j]
    skills = pl.DataFrame(
        cols,
        schema_overrides={
            "tokens": pl.List(pl.String),
            "plan": pl.List(pl.String),
            "attributes": pl.List(pl.String),
        },
    )
    emb = pl.Series("emb", sk.emb[live], dtype=pl.Array(pl.Float32, sk.dim))
    skills.with_columns(emb).write_parquet(d / "skills.parquet")
    pl.DataFrame(
        {
            "id": list(range(len(graph.scenarios))),
            "category": [q.category for q in graph.scenarios],
            "price_max": [q.price_max for q in graph.scenarios],
            "attributes": [list(q.attributes) for q in graph.scenarios],
        },
        schema={
            "id": pl.Int64,
            "category": pl.String,
            "price_max": pl.Float64,
            "attributes": pl.List(pl.String),
        },
    ).write_parquet(d / "scenarios.parquet")
    used = [(u, s, w) for u, row in graph.user_skill.items() for s, w in row.items()]
    _table(used, {"user": pl.Int64, "slot": pl.Int64, "weight": pl.Float64}).write_parquet(d / "used.parquet")
    links = [
        (kind, a, b, w)
        for kind, table in (("complement", graph.complement), ("conflict", graph.conflict))
        for a, row in table.items()
        for b, w in row.items()
    ]
    _table(links, {"kind": pl.String, "a": pl.Int64, "b": pl.Int64, "weight": pl.Float64}).write_parquet(
        d / "links.parquet"
    )
    trajs = [(s, i, t, u) for s, q in graph.trajectories.items() for i, (t, u) in enumerate(q)]
    _table(
        trajs, {"slot": pl.Int64, "position": pl.Int64, "traj_id": pl.String, "user": pl.Int64}
    ).write_parquet(d / "trajectories.parquet")
    users = sorted(set(com.user[0]) | set(com.user[1]))
    pl.DataFrame(
        {
            "user": users,
            "coarse": [com.user[0].get(u, -1) for u in users],
            "fine": [com.user[1].get(u, -1) for u in users],
        },
        schema={"user": pl.Int64, "coarse": pl.Int64, "fine": pl.Int64},
    ).write_parquet(d / "users.parquet")
    meta = {
        "format_version": FORMAT_VERSION,
        "config": graph.cfg.model_dump(mode="json"),
        "components": list(sk.components),
        "clock": graph.clock,
        "next_sid": sk.next_sid,
        "size": sk.size,
        "totals": graph.totals,
        "communities": {
            "next_label": com.next_label,
            "since_refresh": com.since_refresh,
            "size_at_refresh": com.size_at_refresh,
            "refreshes": com.refreshes,
        },
        "users": {"count": len(user_ids), "fingerprint": _fp(user_ids)},
    }
    (d / META).write_text(json.dumps(meta, indent=2) + "\n")
    return d


def _table(rows: list[tuple], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=schema, orient="row")


def check_users(directory: Path, meta: dict, user_ids: Sequence[str]) -> None:
    """One-line ``DataError`` unless ``user_ids`` equals or extends the memory's id map."""
    n, fp = int(meta["users"]["count"]), meta["users"]["fingerprint"]
    if len(user_ids) >= n and _fp(user_ids[:n]) == fp:
        return
    raise DataError(
        f"{directory}: the memory was built on user id map {fp[:12]} ({n} users); the loader's map "
        f"{_fp(user_ids)[:12]} ({len(user_ids)} users) does not extend it: load the memory with the "
        "policy it was published with, or rebuild it"
    )


def load(directory: str | Path, user_ids: Sequence[str]) -> SkillGraph:
    """The graph saved in ``directory``; ``user_ids``: the loader's id map in index order."""
    d = Path(directory)
    if not (d / META).is_file():
        raise DataError(f"{d}: no {META} here: not a saved memory")
    meta = json.loads((d / META).read_text())
    version = int(meta.get("format_version", 0))
    if version != FORMAT_VERSION:
        raise DataError(f"{d}: memory format version {version}; this version of parpo reads {FORMAT_VERSION}")
    check_users(d, meta, user_ids)
    # a memory saved before ``high_value_rule`` existed distilled under ``strict``: it keeps that
    # rule when it goes on learning (a resume, a warm start), whatever today's default
    g = SkillGraph(
        MemoryConfig.model_validate({"high_value_rule": "strict", **meta["config"]}), meta["components"]
    )
    sk, com = g.skills, g.communities
    sk.reserve(int(meta["size"]))
    sk.size, sk.next_sid = int(meta["size"]), int(meta["next_sid"])
    g.clock, g.totals = int(meta["clock"]), dict(meta["totals"])
    scen = pl.read_parquet(d / "scenarios.parquet").sort("id")
    for cat, price, attrs in scen.select("category", "price_max", "attributes").iter_rows():
        g.scenario(Query(cat, price, tuple(attrs)))
    skills = pl.read_parquet(d / "skills.parquet")
    slot = skills["slot"].to_numpy()
    com.reserve(sk.size)
    for name in ("sid", "scenario", "count", "support", "born", "last", "constrained", "k"):
        getattr(sk, name)[slot] = skills[name].to_numpy()
    sk.emb[slot] = skills["emb"].to_numpy()
    for j, c in enumerate(sk.components):
        sk.rsum[slot, j], sk.rsq[slot, j] = skills[f"sum_{c}"].to_numpy(), skills[f"sq_{c}"].to_numpy()
    sk.alive[slot] = True
    com.skill[0, slot], com.skill[1, slot] = skills["coarse"].to_numpy(), skills["fine"].to_numpy()
    for s, toks, plan, strat, attrs, text, sc, sid in skills.select(
        "slot", "tokens", "plan", "strategy", "attributes", "text", "scenario", "sid"
    ).iter_rows():
        sk.plan[s], sk.strategy[s], sk.attributes[s], sk.text[s] = tuple(plan), strat, tuple(attrs), text
        sk.tokens[s] = tuple(toks)
        g.blocks[sc].add(s)
        g.sid_slot[sid] = s
        g.trajectories[s] = deque(maxlen=g.cfg.trajectories_per_skill)
    sk.refree()
    for u, s, w in pl.read_parquet(d / "used.parquet").iter_rows():
        g.user_skill.setdefault(u, {})[s] = w
        g.skill_user.setdefault(s, {})[u] = w
    for kind, a, b, w in pl.read_parquet(d / "links.parquet").iter_rows():
        (g.complement if kind == "complement" else g.conflict).setdefault(a, {})[b] = w
    for s, _, t, u in pl.read_parquet(d / "trajectories.parquet").sort("slot", "position").iter_rows():
        g.trajectories[s].append((t, u))
    for u, c, f in pl.read_parquet(d / "users.parquet").iter_rows():
        if c >= 0:
            com.user[0][u] = c
        if f >= 0:
            com.user[1][u] = f
    state = meta["communities"]
    com.next_label, com.since_refresh = list(state["next_label"]), int(state["since_refresh"])
    com.size_at_refresh, com.refreshes = int(state["size_at_refresh"]), int(state["refreshes"])
    return g
