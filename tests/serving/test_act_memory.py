"""POST /v1/act with a policy that has a skill memory: the answer names the retrieved skills."""

from __future__ import annotations

import shutil

import polars as pl
import pytest

from parpo.trainer.config import PolicyTrainConfig
from tests.plugins.policies import FAST_OVERRIDES
from tests.serving.helpers import client, wait_ready

pytestmark = pytest.mark.integration


def test_the_answer_names_the_skills_the_memory_retrieved(
    tiny_synth, published_reward, serve_registry, tmp_path
):
    from parpo.presets import load
    from parpo.trainer.pipeline import train_and_publish

    reg = tmp_path / "REG"
    shutil.copytree(published_reward, reg)
    cfg = load(
        PolicyTrainConfig, "policy", "default", [*FAST_OVERRIDES, "train.updates=2", "policy.memory_skills=2"]
    )
    version = train_and_publish(cfg, tiny_synth, reg, run_dir=tmp_path / "run").version
    memory = version.path / "policy" / "memory"
    from parpo.policy.bundle import PolicyBundle

    index = PolicyBundle.load(reg).reward_model.user_index
    ids = sorted(index, key=index.__getitem__)
    # users the memory knows (dense indices in used.parquet), by their external ids
    users = [ids[u] for u in pl.read_parquet(memory / "used.parquet")["user"].unique().sort().to_list()]
    with client(reg, tmp_path / "ev") as c:
        wait_ready(c)
        answers = [c.post("/v1/act", json={"request_id": f"r{u}", "user_id": u, "k": 4}) for u in users[:5]]
    named = [a.json()["skills"] for a in answers]
    assert all(a.status_code == 200 for a in answers) and all(isinstance(s, list) for s in named)
    hits = [s for skills in named for s in skills]
    assert hits, "no request retrieved a skill"
    for s in hits:
        assert s["scenario"].endswith(tuple(f"|{b}" for b in range(-1, 17)))
        assert s["plan"] and s["reason"]["path"][-1] == f"skill:{s['skill_id']}"
        assert s["reason"]["score"] == pytest.approx(sum(s["reason"]["terms"].values()))
    # a policy without memory names none
    with client(serve_registry[0], tmp_path / "ev2") as c:
        wait_ready(c)
        assert (
            c.post("/v1/act", json={"request_id": "x", "user_id": "u0001", "k": 4}).json()["skills"] is None
        )
