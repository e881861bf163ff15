"""Value-based options in the trainer: each preset trains on the tiny synthetic world without NaN
and logs its components; PACT's critic sees the updated actor's importance ratio."""

from __future__ import annotations

import math

import polars as pl
import pytest
import torch

from parpo.trainer.loop import PolicyTrainer
from tests.plugins.policies import FAST_OVERRIDES

pytestmark = pytest.mark.integration


def _config(preset: str, *extra: str):
    from parpo.presets import load
    from parpo.trainer.config import PolicyTrainConfig

    # G = 1 presets (sao) get the same 64 rollouts per update as the others (16 tasks x 4).
    size = ["train.group_size=1", "train.tasks_per_update=64"] if preset == "sao" else []
    return load(PolicyTrainConfig, "policy", preset, [*FAST_OVERRIDES, "train.updates=2", *size, *extra])


@pytest.mark.parametrize(
    ("preset", "logged"),
    [
        ("gae", ("critic/loss", "critic/explained_variance", "returns/mean")),
        ("turn_gae", ("critic/loss", "turn/count_mean")),
        ("sao", ("critic/loss", "gae/lambda_mean", "actor/pg/clipfrac", "queue/staleness")),
        ("pact", ("critic/loss", "critic/is_weight_mean", "critic/target_clamped_frac")),
        ("shaped", ("reward/task/overlong/mean", "reward/task/invalid_call/mean", "task/overlong/adv_mean")),
    ],
)
def test_each_option_trains_without_nan_and_logs_its_components(source, tmp_path, preset, logged):
    cfg = _config(preset)
    res = PolicyTrainer(cfg, source, tmp_path / "run").fit()
    log = pl.read_csv(res.logs)
    assert log["update"].to_list() == [1, 2]
    for k in logged:
        assert k in log.columns, k
    if cfg.value_based:
        assert {"value_reward/mean", "preference/frac_anchored", "adv/mean"} <= set(log.columns)
    for k in log.columns:
        assert all(math.isfinite(v) for v in log[k].drop_nulls().to_list()), k
    for name, p in res.policy.net.named_parameters():
        assert torch.isfinite(p).all(), name
    if preset == "shaped":  # clipped penalties: -0.25 at most, never positive
        assert log["reward/task/overlong/min"].min() >= -0.25
        assert log["reward/task/overlong/max"].max() <= 0.0


def test_actor_then_critic_fits_the_critic_with_the_updated_actors_ratio(source, tmp_path, monkeypatch):
    import parpo.trainer.loop as loop
    from parpo.trainer.critic import critic_weights

    seen = {}

    def spy(new_logp, old_logp, mask, episode, n_episodes, cap):
        seen.update(new=new_logp.clone(), old=old_logp.clone(), mask=mask, episode=episode, cap=cap)
        return critic_weights(new_logp, old_logp, mask, episode, n_episodes, cap)

    rolls = []
    real_collect = loop.collect

    def keep(*a, **kw):
        rolls.append(real_collect(*a, **kw))
        return rolls[-1]

    monkeypatch.setattr(loop, "critic_weights", spy)
    monkeypatch.setattr(loop, "collect", keep)
    res = PolicyTrainer(_config("pact", "train.updates=1"), source, tmp_path / "run").fit()
    roll = rolls[-1]
    # The critic's phase never moves the policy (the value head reads a detached state), so the
    # trained policy *is* the updated actor: its log-probs of the rollout are what the critic saw.
    res.policy.net.eval()
    with torch.no_grad():
        after = res.policy.net(roll.inputs, roll.tokens, res.policy.temperature)[0]
    torch.testing.assert_close(seen["new"], after, rtol=0, atol=1e-6)
    torch.testing.assert_close(seen["old"], roll.old_logp, rtol=0, atol=0)
    moved = ((seen["new"] - seen["old"]).abs() * roll.mask).max()
    assert moved > 1e-4  # the actor did update before the critic was fitted
    w = critic_weights(seen["new"], seen["old"], roll.mask, roll.episode, len(roll.infos), seen["cap"])
    assert not torch.allclose(w, torch.ones_like(w))
    assert res.history[-1]["critic/is_weight_mean"] == pytest.approx(float(w.mean()), rel=1e-6)


def test_a_value_run_resumes_exactly(source, tmp_path):
    """The value head and its optimiser state are in the checkpoint (PACT: both phases, BCE)."""
    from parpo.trainer.loop import LAST

    straight = PolicyTrainer(_config("pact"), source, tmp_path / "a").fit()
    PolicyTrainer(_config("pact", "train.updates=1"), source, tmp_path / "b").fit()
    resumed = PolicyTrainer(_config("pact"), source, tmp_path / "b").fit(resume=tmp_path / "b" / LAST)
    a, b = straight.policy.net.state_dict(), resumed.policy.net.state_dict()
    assert any(k.startswith("value_head.") for k in a)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=0, msg=k)


def test_single_rollout_with_no_staleness_is_the_synchronous_loop(source, tmp_path):
    """The queue's batches depend on their weights' version and the generators, never on thread
    timing: with max_staleness 0 the overlapped loop is the joint one, bit for bit."""
    sync = PolicyTrainer(_config("sao", "train.updates=3", "train.order=joint"), source, tmp_path / "a").fit()
    queued = _config("sao", "train.updates=3", "train.order=single_rollout", "train.max_staleness=0")
    res = PolicyTrainer(queued, source, tmp_path / "b").fit()
    a, b = sync.policy.net.state_dict(), res.policy.net.state_dict()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=0, msg=k)
    assert [m["queue/staleness"] for m in res.history] == [0, 0, 0]


def test_single_rollout_staleness_is_bounded_logged_and_reproducible(source, tmp_path):
    cfg = _config("sao", "train.updates=4", "train.order=single_rollout", "train.max_staleness=2")
    one = PolicyTrainer(cfg, source, tmp_path / "a").fit()
    two = PolicyTrainer(cfg, source, tmp_path / "b").fit()
    assert [m["queue/staleness"] for m in one.history] == [0, 1, 2, 2]
    log = pl.read_csv(one.logs)
    assert {"queue/wait_s", "critic/loss", "actor/pg/clipfrac"} <= set(log.columns)
    a, b = one.policy.net.state_dict(), two.policy.net.state_dict()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=0, msg=k)


def test_single_rollout_resumes_with_the_right_task_stream(source, tmp_path, monkeypatch):
    """A checkpoint holds the generators as they were before the next batch, not as the thread
    left them: the resumed run draws the same tasks as the straight one."""
    import parpo.trainer.loop as loop
    from parpo.trainer.loop import LAST
    from tests.plugins.policies import record_drawn_tasks

    drawn = record_drawn_tasks(monkeypatch, loop)
    cfg = _config("sao", "train.updates=3", "train.order=single_rollout")
    straight = PolicyTrainer(cfg, source, tmp_path / "a").fit()
    straight_tasks, drawn[:] = list(drawn), []
    PolicyTrainer(
        _config("sao", "train.updates=1", "train.order=single_rollout"), source, tmp_path / "b"
    ).fit()
    first, drawn[:] = list(drawn), []
    resumed = PolicyTrainer(cfg, source, tmp_path / "b").fit(resume=tmp_path / "b" / LAST)
    # the 1-update run's thread stopped after its one batch; the resumed run draws batches 2 and 3
    assert first == straight_tasks[:1] and drawn == straight_tasks[1:]
    assert [m["update"] for m in resumed.history] == [1, 2, 3]
    # the batch after the resume is collected with the resumed (fresher) weights: staleness 0
    assert [m["queue/staleness"] for m in straight.history] == [0, 1, 1]
    assert [m["queue/staleness"] for m in resumed.history] == [0, 0, 1]
