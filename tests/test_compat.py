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
    user = sorted(bundle.reward_model.user_index)[0]
    per_task, _ = bundle.rollout(bundle.agent(0.0), [bundle.task("r1", user, Request(), k=5)])
    (slate,) = per_task["slate"].to_list()
    assert 1 <= len(slate) <= 5 and set(slate) <= set(bundle.catalogue.item_ids)
