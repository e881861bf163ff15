"""The closed loop: a short training run writes its episodes into the memory, the policy sees
retrieved skills, and the memory travels with the saved policy."""

from __future__ import annotations

import polars as pl
import pytest

from parpo.memory.store import load
from parpo.policy.native import MEMORY, NativePolicy
from parpo.trainer.loop import LAST, PolicyInit, PolicyTrainer
from tests.plugins.policies import fast_config

pytestmark = pytest.mark.integration


def with_memory(updates: int):
    cfg = fast_config(updates=updates)
    policy = cfg.policy.model_copy(update={"memory_skills": 2})
    return cfg.model_copy(update={"policy": policy})


def test_training_grows_the_memory_deterministically_and_the_policy_carries_it(source, tmp_path):
    res = PolicyTrainer(with_memory(3), source, tmp_path / "a").fit()
    log = pl.read_csv(res.logs)
    skills = log["memory/skills"].to_list()
    assert skills == sorted(skills) and skills[-1] > 0  # no eviction at this size
    assert log["memory/high_value"].sum() >= skills[-1]  # every skill came from a high-value episode
    assert log["memory/hit_rate"].to_list()[0] == 0.0 and log["memory/hit_rate"].to_list()[-1] > 0
    for k in ("memory/merged", "memory/communities_coarse", "memory/communities_fine"):
        assert k in log.columns
    again = PolicyTrainer(with_memory(3), source, tmp_path / "b").fit()
    index = source.reward_model.user_index
    ids = sorted(index, key=index.__getitem__)
    a, b = load(tmp_path / "a" / "memory", ids), load(tmp_path / "b" / "memory", ids)
    for name in ("skills", "used", "links", "trajectories"):
        assert pl.read_parquet(tmp_path / "a" / "memory" / f"{name}.parquet").equals(
            pl.read_parquet(tmp_path / "b" / "memory" / f"{name}.parquet")
        ), name
    assert len(a) == len(b) == skills[-1] and again.history[-1]["memory/skills"] == skills[-1]
    # the saved policy carries its memory; loading it retrieves the same skills
    res.policy.save(tmp_path / "policy")
    assert (tmp_path / "policy" / MEMORY / "memory.json").is_file()
    loaded = NativePolicy.load(tmp_path / "policy", source.reward_model, source.catalogue)
    tasks = source.tasks("warm")[:8]
    want = [[h.skill_id for h in hits] for hits in res.policy.featurizer.memory.retrieved(tasks)]
    assert [[h.skill_id for h in hits] for hits in loaded.featurizer.memory.retrieved(tasks)] == want
    x = loaded.featurizer.encode([o for o in source.env().reset(tasks)])
    assert x["skills"].shape == (8, 2, 12) and x["skill_mask"].any()
    # a warm start (``parpo retrain --policy``) carries the memory: the run starts from its skills
    init = PolicyInit(res.policy.net.state_dict(), None, tmp_path / "policy" / MEMORY)
    warm = PolicyTrainer(with_memory(1), source, tmp_path / "warm", init=init).fit()
    assert warm.history[0]["memory/hit_rate"] > 0  # the first update already retrieves skills
    assert warm.history[0]["memory/skills"] >= skills[-1]
    # and resumes: its memory's clock started at the base's 3 updates, not at 0
    more = PolicyTrainer(with_memory(2), source, tmp_path / "warm").fit(resume=tmp_path / "warm" / LAST)
    assert [h["update"] for h in more.history] == [1, 2]
    assert load(tmp_path / "warm" / "memory", ids).clock == 3 + 2


def test_two_ddp_ranks_write_back_the_same_memory(tiny_synth, published_reward, tmp_path):
    import shutil

    from tests.cli.test_policy import FAST, run

    reg = tmp_path / "REG"
    shutil.copytree(published_reward, reg)
    res = run("policy", "train", "-d", str(tiny_synth), "-r", str(reg), "-o", str(tmp_path / "run"),
              *FAST, "runtime.devices=2", "policy.memory_skills=2")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    log = pl.read_csv(tmp_path / "run" / "logs" / "metrics.csv")
    assert log["memory/rank_divergence"].to_list() == [0.0, 0.0]
    assert log["memory/skills"].to_list()[-1] > 0
    assert any((reg / "policy").glob("*/policy/memory/memory.json"))  # published with the policy


def test_a_resumed_run_has_the_same_memory_and_policy_as_a_straight_one(source, tmp_path):
    """``test_resume_continues_exactly`` (tests/parpo/trainer/test_loop.py) with the memory on:
    the memory saved with each checkpoint is reloaded with it, so the resumed run retrieves and
    writes back exactly as the uninterrupted one; a memory out of step with its checkpoint is
    refused in one line."""
    import shutil

    import torch

    from parpo_core.errors import DataError

    def same(run, ref):
        a, b = ref.policy.net.state_dict(), run.policy.net.state_dict()
        for k in a:
            torch.testing.assert_close(b[k], a[k], rtol=0, atol=0, msg=k)

    def same_memory(x, y):
        for name in ("skills", "scenarios", "used", "links", "trajectories", "users"):
            assert pl.read_parquet(x / f"{name}.parquet").equals(pl.read_parquet(y / f"{name}.parquet")), name
        assert (x / "memory.json").read_text() == (y / "memory.json").read_text()

    straight = PolicyTrainer(with_memory(3), source, tmp_path / "a").fit()
    every = with_memory(2)
    every = every.model_copy(update={"train": every.train.model_copy(update={"checkpoint_every": 1})})
    PolicyTrainer(every, source, tmp_path / "b").fit()
    resumed = PolicyTrainer(with_memory(3), source, tmp_path / "b").fit(resume=tmp_path / "b" / LAST)
    same(resumed, straight)
    same_memory(tmp_path / "b" / "memory", tmp_path / "a" / "memory")
    skip = ("time/", "throughput/")
    last_a = {k: v for k, v in straight.history[-1].items() if not k.startswith(skip)}
    last_b = {k: v for k, v in resumed.history[-1].items() if not k.startswith(skip)}
    assert last_b == pytest.approx(last_a, abs=1e-9) and last_a["memory/skills"] > 0
    # an older checkpoint resumes with the memory as it was then (update-1.memory), in a new run
    older = PolicyTrainer(with_memory(3), source, tmp_path / "c").fit(resume=tmp_path / "b" / "update-1.ckpt")
    same(older, straight)
    same_memory(tmp_path / "c" / "memory", tmp_path / "a" / "memory")
    # without the checkpoint's memory the run would start from an empty one: refused
    shutil.rmtree(tmp_path / "b" / "update-2.memory")
    with pytest.raises(DataError, match=r"update-2.memory.* clock 0 .* checkpoint \(update 2\) expects 2"):
        PolicyTrainer(with_memory(3), source, tmp_path / "d").fit(resume=tmp_path / "b" / "update-2.ckpt")
