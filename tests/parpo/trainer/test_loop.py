"""The training loop: rollouts, logged components, anchors, exact resume."""

from __future__ import annotations

import polars as pl
import pytest
import torch

from parpo.env import COMPONENTS
from parpo.trainer.loop import LAST, PolicyTrainer
from parpo.trainer.rollout import collect
from tests.plugins.policies import fast_config

pytestmark = pytest.mark.integration


def test_rollouts_group_g_episodes_per_task_and_sum_episodic_rewards(source):
    from parpo.policy.native import NativePolicy

    cfg = fast_config()
    torch.manual_seed(0)
    policy = NativePolicy.create(cfg.policy, source.reward_model, source.catalogue, cfg.env.search_k)
    tasks = source.tasks("train")[:5]
    roll = collect(
        policy,
        source.env(),
        tasks,
        3,
        source.reward_model.user_index,
        generator=torch.Generator().manual_seed(1),
    )
    assert roll.group.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    assert set(roll.rewards) == set(COMPONENTS)
    assert all(v.shape == (15,) for v in roll.rewards.values())
    # Every episode has between 1 and max_steps samples, its first one a search.
    steps = torch.bincount(roll.episode, minlength=15)
    assert steps.min() >= 1 and steps.max() <= cfg.env.max_steps
    assert [i["steps"] for i in roll.infos] == steps.tolist()
    # Components are episodic (non-zero only at the final step), so the per-episode sums stay in [0, 1].
    for k, v in roll.rewards.items():
        assert ((v >= 0) & (v <= 1)).all(), k
    users = [source.reward_model.user_index[t.user_id] for t in tasks for _ in range(3)]
    assert roll.user.tolist() == users
    assert roll.old_logp.shape == roll.mask.shape == roll.tokens.shape


def test_training_logs_every_component_and_anchors(source, tmp_path):
    res = PolicyTrainer(fast_config(updates=2), source, tmp_path / "run").fit()
    log = pl.read_csv(res.logs)
    assert log["update"].to_list() == [1, 2]
    for k in COMPONENTS:
        for stat in ("mean", "std", "min", "max"):
            assert f"reward/{k}/{stat}" in log.columns
        assert f"{k}/frac_zero_std" in log.columns
    for k in (
        "actor/entropy",
        "actor/loss",
        "anchors/users",
        "anchors/mean_mu",
        "report/hit@10",
        "report/task_quality",
    ):
        assert k in log.columns, k
    assert log["anchors/users"].to_list()[-1] == len(res.anchors) > 0


def test_resume_continues_exactly(source, tmp_path):
    straight = PolicyTrainer(fast_config(updates=2), source, tmp_path / "a").fit()
    PolicyTrainer(fast_config(updates=1), source, tmp_path / "b").fit()
    resumed = PolicyTrainer(fast_config(updates=2), source, tmp_path / "b").fit(resume=tmp_path / "b" / LAST)
    a, b = straight.policy.net.state_dict(), resumed.policy.net.state_dict()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=0, msg=k)
    sa, sb = straight.anchors.state_dict(), resumed.anchors.state_dict()
    for k in ("user", "mean", "var", "count"):
        torch.testing.assert_close(sb[k], sa[k], rtol=0, atol=0)
    skip = ("time/", "throughput/")
    last_a = {k: v for k, v in straight.history[-1].items() if not k.startswith(skip)}
    last_b = {k: v for k, v in resumed.history[-1].items() if not k.startswith(skip)}
    assert last_b == pytest.approx(last_a, abs=1e-9)
    # The resumed run's log holds both updates.
    assert pl.read_csv(resumed.logs)["update"].to_list() == [1, 2]


def test_a_split_without_train_positives_is_a_one_line_error(source, tmp_path):
    import dataclasses

    from parpo_core.errors import DataError

    empty = dataclasses.replace(
        source, split=dataclasses.replace(source.split, train=source.split.train.head(0))
    )
    with pytest.raises(
        DataError, match=r"no training task: the train part of the intervened split holds no positive"
    ):
        PolicyTrainer(fast_config(updates=1), empty, tmp_path / "run").fit()
