"""POST /v1/act with a policy that has a skill memory: the answer names the retrieved skills,
and the memory swaps with the policy on reload."""

from __future__ import annotations

import shutil
import time

import polars as pl
import pytest

from parpo.trainer.config import PolicyTrainConfig
from tests.plugins.policies import FAST_OVERRIDES
from tests.serving.helpers import client, wait_ready

pytestmark = pytest.mark.integration


def test_the_answer_names_the_skills_and_they_swap_on_reload(
    tiny_synth, serve_registry, tmp_path, monkeypatch
):
    from parpo.policy.bundle import PolicyBundle
    from parpo.presets import load
    from parpo.trainer.pipeline import train_and_publish

    base, (_, plain) = serve_registry
    reg = tmp_path / "REG"
    shutil.copytree(base, reg)
    cfg = load(
        PolicyTrainConfig, "policy", "default", [*FAST_OVERRIDES, "train.updates=2", "policy.memory_skills=2"]
    )
    version = train_and_publish(cfg, tiny_synth, reg, run_dir=tmp_path / "run").version
    index = PolicyBundle.load(reg, version.name).reward_model.user_index
    ids = sorted(index, key=index.__getitem__)
    # users the memory knows (dense indices in used.parquet), by their external ids
    used = pl.read_parquet(version.path / "policy" / "memory" / "used.parquet")
    users = [ids[u] for u in used["user"].unique().sort().to_list()][:5]

    def act(c, u: str) -> dict:
        r = c.post("/v1/act", json={"request_id": f"r-{u}", "user_id": u, "k": 4})
        assert r.status_code == 200, r.text
        return r.json()

    monkeypatch.setenv("PARPO_ADMIN_TOKEN", "s3cret")
    with client(reg, tmp_path / "ev", policy=plain) as c:
        wait_ready(c)
        assert [act(c, u)["skills"] for u in users] == [None] * len(users)  # a policy without memory
        r = c.post(
            "/v1/models/reload", json={"version": version.name}, headers={"Authorization": "Bearer s3cret"}
        )
        assert r.status_code == 202
        end = time.monotonic() + 60
        while c.get("/v1/models").json()["serving"]["policy_version"] != version.name:
            assert time.monotonic() < end
            time.sleep(0.05)
        named = [act(c, u)["skills"] for u in users]
    assert all(isinstance(s, list) for s in named)
    hits = [s for skills in named for s in skills]
    assert hits, "no request retrieved a skill"
    for s in hits:
        assert s["scenario"].split("|")[-1] in {str(b) for b in range(-1, 17)}
        assert s["plan"] and s["reason"]["path"][-1] == f"skill:{s['skill_id']}"
        assert s["reason"]["score"] == pytest.approx(sum(s["reason"]["terms"].values()))
