"""Artefacts written by an earlier release still open, verify, list, score and act.

``tests/fixtures/release-0.1.0`` holds a dataset and a registry (a reward and a policy
version, with an evaluation) written by release 0.1.0, before the registry moved to
``parpo_core.artefacts``. Each later release keeps this test green (add a fixture per
release whose on-disk formats change).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from data_pipelines.dataset import Dataset
from parpo.env.schema import Request
from parpo.policy.bundle import PolicyBundle
from parpo_core.artefacts import Registry
from reward_models.readout import RewardModel

FIXTURE = Path(__file__).parent / "fixtures" / "release-0.1.0"


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A writable copy (opening a dataset may recover it; evals are add-only writes)."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "old"))


def test_old_dataset_opens_with_its_tables(old: Path) -> None:
    ds = Dataset(old / "data")
    assert ds.source == "synthetic"
    users = ds.interactions().select("user_id").unique().collect()
    assert users.height == 40


def test_old_registry_verifies_and_lists_each_kinds_metrics(old: Path) -> None:
    reg = Registry(old / "registry")
    for kind in ("reward", "policy"):
        assert reg.verify(kind).name == reg.versions(kind)[0]
        assert reg.aliases(kind) == {"production": reg.versions(kind)[0], "latest": reg.versions(kind)[0]}
    (reward,) = reg.list_versions("reward")
    assert reward.metrics_source == "test" and set(reward.metrics) == {
        "ndcg@10",
        "recall@10",
        "hit@10",
        "mrr@10",
    }
    (policy,) = reg.list_versions("policy")
    # The fixture's policy was evaluated on its own data and split: the listing reads that eval.
    assert policy.metrics_source == "eval greedy"
    assert {"hit@10", "task_quality", "true_pref", "cold hit@10"} <= set(policy.metrics)
    assert all(0.0 <= policy.metrics[k] <= 1.0 for k in ("hit@10", "task_quality", "cold hit@10"))


def test_old_reward_version_scores(old: Path) -> None:
    rm = RewardModel.load(old / "registry")
    users = sorted(rm.user_index)[:3]
    items = sorted(rm.item_index)[:3]
    s = rm.score(users, items)
    assert s["interest"].shape == s["conformity"].shape == s["click"].shape == (3,)
    assert all(np.isfinite(s[k]).all() for k in ("interest", "conformity", "click"))
    assert s["cold"].dtype == bool and s["cold"].shape == (3,)
    pref = rm.preference_reward(users, [items, items[:1], items[1:]])
    assert pref.shape == (3,) and ((pref >= 0) & (pref <= 1)).all()


def test_old_policy_version_acts(old: Path) -> None:
    bundle = PolicyBundle.load(old / "registry")
    # Saved before personal features existed: it keeps acting on the catalogue features only.
    assert not bundle.policy.net.cfg.personal_features
    assert bundle.policy.net.value_head is None  # saved before value heads: loads without one
    user = sorted(bundle.reward_model.user_index)[0]
    per_task, _ = bundle.rollout(bundle.agent(0.0), [bundle.task("r1", user, Request(), k=5)])
    (slate,) = per_task["slate"].to_list()
    assert 1 <= len(slate) <= 5 and set(slate) <= set(bundle.catalogue.item_ids)


def test_old_dataset_takes_an_append_under_the_current_id_rule(old: Path, tmp_path: Path) -> None:
    """0.1.0 recorded no id rule and no raw_base64 in its rejects: its ids all follow rule 1,
    so server logs append (recording the rule), and `parpo data summary` reads both rejects."""
    import json

    import polars as pl

    from data_pipelines.adapters import open_source
    from data_pipelines.ingest import ingest
    from parpo.cli.data import _top_rejects
    from parpo_core.limits import ID_RULE_VERSION

    data = old / "data"
    assert "id_rule_version" not in Dataset(data).manifest
    logs = tmp_path / "events" / "decisions"
    logs.mkdir(parents=True)
    decision = {
        "kind": "decision", "schema_version": 1, "ts": 1_764_500_000.0, "request_id": "r1",
        "user_id": " u0022", "request": {"category": None, "constraints": None, "text": None},
        "k": 1, "policy_version": "v000001", "explore": 1.0, "n_samples": 4, "evaluable": True,
        "fallback": None, "slate": [{"item_id": "i0003", "position": 1, "propensity": 0.5}],
    }  # fmt: skip
    (logs / "a.jsonl").write_bytes(b"\xef\xbb\xbf" + json.dumps(decision).encode() + b"\n\xff\n")
    s = ingest(open_source("parpo-events", tmp_path / "events"), data)
    assert (s["ingests"][-1]["rows_written"], s["ids_trimmed"]) == (1, 1)
    ds = Dataset(data)
    assert ds.manifest["id_rule_version"] == ID_RULE_VERSION
    assert ds.idmap("users").height == 40  # u0022, trimmed, is the fixture's user
    row = ds.interactions().filter(pl.col("request_id") == "r1").collect()
    assert row.select("user_id", "item_id", "propensity").rows() == [("u0022", "i0003", 0.5)]
    assert _top_rejects(data) == [("line is not valid UTF-8", 1)]
