"""What a report shows, read from each policy version's files: the training log
(``logs/metrics.csv``), ``anchors.parquet``, the catalogue snapshot's popularity, its
single-policy evals (with their per-task parquets), comparisons and any OPE result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from data_pipelines.metrics.bias import gini, head_mask, recommendation_counts
from parpo.evaluation.policy_eval import read_tasks, tasks_path
from parpo.policy.bundle import ANCHORS, CATALOGUE, KIND

LOG = "logs/metrics.csv"


@dataclass
class PolicyData:
    """One version's material; missing pieces are None (or empty) and the report says so."""

    name: str
    log: pl.DataFrame | None
    anchors: pl.DataFrame | None
    item_ids: list[str]
    popularity: np.ndarray  # [I] train interaction counts of the catalogue snapshot
    eval_file: str | None = None
    eval: dict[str, Any] | None = None  # ``result`` of the chosen single-policy eval
    tasks: pl.DataFrame | None = None  # its per-task rows (every agent)
    reward_version: str | None = None  # the reward version it was trained against (lineage)
    reward_metrics: dict[str, Any] | None = None  # that version's metrics.json
    # other reward versions on the same data and split: (name, model label, metrics.json)
    reward_peers: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    comparisons: list[dict[str, Any]] = field(default_factory=list)  # results of ``eval compare``
    ope: list[dict[str, Any]] = field(default_factory=list)  # results holding an ``ope`` section


def _read(path: Path, reader: Any) -> pl.DataFrame | None:
    return reader(path) if path.is_file() else None


def load_policy(registry: str | Path, version: str | None) -> PolicyData:
    """Read one version. Its single-policy eval: the first greedy one by file name (evals are
    add-only and named by data, split and config hash, so that choice is stable)."""
    from parpo_core.artefacts import Registry
    from parpo_core.errors import UserError

    reg = Registry(registry)
    v = reg.open(KIND, version, verify=False)
    cat = pl.read_parquet(v.path / CATALOGUE)
    data = PolicyData(
        name=v.name,
        log=_read(v.path / LOG, pl.read_csv),
        anchors=_read(v.path / ANCHORS, pl.read_parquet),
        item_ids=cat["item_id"].to_list(),
        popularity=cat["popularity"].cast(pl.Int64).to_numpy(),
    )
    data.reward_version = v.lineage.reward
    if data.reward_version:
        try:
            data.reward_metrics = reg.open("reward", data.reward_version, verify=False).metrics
        except UserError:  # the reward version was removed: the report says so
            data.reward_metrics = None
        data.reward_peers = reward_peers(reg, data.reward_version)
    for rec in reg.evals(KIND, v.name):
        res = rec.get("result") or {}
        if "against" in res:
            data.comparisons.append(res)
        elif "ope" in res:
            data.ope.append(res)
        elif "warm" in res and data.eval is None and res.get("greedy", True):
            path = v.path / "evals" / rec["file"]
            if tasks_path(path).is_file():
                data.eval_file, data.eval, data.tasks = rec["file"], res, read_tasks(path)
    return data


def model_label(config: dict[str, Any]) -> str:
    """``dice`` / ``mf`` (no disentanglement), with the backbone when it is not MF."""
    m = config.get("model") or {}
    name = "dice" if m.get("disentangle", True) else "mf"
    return name if m.get("backbone", "mf") == "mf" else f"{name} ({m['backbone']})"


def reward_peers(reg: Any, version: str) -> list[tuple[str, str, dict[str, Any]]]:
    """The other reward versions trained on ``version``'s data and split (e.g. an MF beside the
    DICE a policy used), with a model label and their metrics.json, in publish order."""
    from parpo_core.errors import UserError

    try:
        base = reg.open("reward", version, verify=False).lineage
    except UserError:
        return []
    out = []
    for info in reg.list_versions("reward"):
        if info.name == version or info.data_fingerprint != base.data_fingerprint:
            continue
        if (info.split, info.split_seed) != (base.split.name, base.split.seed):
            continue
        v = reg.open("reward", info.name, verify=False)
        if v.metrics:
            out.append((info.name, model_label(v.config), v.metrics))
    return out


def default_versions(registry: str | Path) -> list[str]:
    """Every policy version with at least one recorded eval, in publish order."""
    from parpo_core.artefacts import Registry

    reg = Registry(registry)
    return [i.name for i in reg.list_versions(KIND) if reg.evals(KIND, i.name)]


def slate_bias(slates: list[list[str]], item_ids: list[str], popularity: np.ndarray) -> dict[str, float]:
    """Popularity bias of served slates of any length, over all their slots (the ``bias_metrics``
    definitions of ``data_pipelines.metrics.bias``, which need equal-length lists): ``avg_pop``,
    ``avg_pop_norm``, ``gini`` (of the items' recommendation counts over the catalogue),
    ``tail_share`` (slots holding a tail item), ``coverage`` and ``n_slots``."""
    row = {k: i for i, k in enumerate(item_ids)}
    slots = np.array([row[i] for s in slates for i in s if i in row], dtype=np.int64)
    pop = popularity.astype(np.float64)
    if slots.size == 0:
        return {"avg_pop": 0.0, "avg_pop_norm": 0.0, "gini": 0.0, "tail_share": 0.0, "coverage": 0.0,
                "n_slots": 0}  # fmt: skip
    counts = recommendation_counts(slots, pop.size)
    avg = float(pop[slots].mean())
    return {
        "avg_pop": avg,
        "avg_pop_norm": avg / pop.max() if pop.max() > 0 else 0.0,
        "gini": gini(counts),
        "tail_share": float(1.0 - head_mask(pop)[slots].mean()),
        "coverage": float(np.count_nonzero(counts) / pop.size),
        "n_slots": int(slots.size),
    }


def agent_bias(data: PolicyData) -> dict[str, dict[str, float]]:
    """``slate_bias`` of each agent's served slates over all evaluated tasks (warm and cold)."""
    if data.tasks is None:
        return {}
    return {
        agent: slate_bias(
            data.tasks.filter(pl.col("agent") == agent)["slate"].to_list(), data.item_ids, data.popularity
        )  # fmt: skip
        for agent in data.tasks["agent"].unique(maintain_order=True).to_list()
    }


def head_tail_hits(data: PolicyData) -> dict[str, dict[str, float]]:
    """Per agent, mean hit@10 over tasks whose held-out item is a head item and a tail item
    (``head_mask`` of the catalogue popularity), with the task counts."""
    if data.tasks is None or "target" not in data.tasks.columns:
        return {}
    head = set(np.asarray(data.item_ids)[head_mask(data.popularity)].tolist())
    t = data.tasks.with_columns(pl.col("target").is_in(list(head)).alias("head"))
    out: dict[str, dict[str, float]] = {}
    for agent in t["agent"].unique(maintain_order=True).to_list():
        a = t.filter(pl.col("agent") == agent)
        h, tl = a.filter(pl.col("head")), a.filter(~pl.col("head"))
        out[agent] = {
            "head": float(h["hit@10"].mean()) if h.height else float("nan"),
            "tail": float(tl["hit@10"].mean()) if tl.height else float("nan"),
            "n_head": h.height,
            "n_tail": tl.height,
        }
    return out
