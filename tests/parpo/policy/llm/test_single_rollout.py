"""``train.order: single_rollout`` on the LLM backend (SAO): episodes generated in a background
thread by a replica of the model, a bounded number of updates stale. With the real ``hf`` engine on
the tiny model the sampled tokens depend on the weights, so these tests see which version of the
weights generated each batch."""

from __future__ import annotations

import pytest
import torch

from parpo.trainer.checkpoint import LAST

pytestmark = pytest.mark.llm


def _cfg(tiny_llm, *overrides: str):
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.presets import load

    small = [
        f"policy.model={tiny_llm}",
        "policy.max_new_tokens=8",
        "policy.top_candidates=4",
        "env.max_steps=2",
        "runtime.threads=1",
        "train.updates=3",
        "train.tasks_per_update=3",
        "train.micro_batch_size=4",
        "train.progress_bar=false",
        "optim.lr=0.01",  # the tiny model's tokens change from one version to the next
    ]
    return load(LLMTrainConfig, "policy", "llm-sao", [*small, *overrides])


def _weights(res) -> dict[str, torch.Tensor]:
    from parpo.policy.llm.trainer import trainable

    return {k: v.clone() for k, v in trainable(res.policy).state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_no_staleness_is_the_synchronous_loop_and_staleness_changes_the_run(
    tiny_llm, source, tmp_path
) -> None:
    """max_staleness 0: the queued run is the joint one bit for bit (the replica generates with
    exactly the trainer's weights); max_staleness 1: batches 2 and 3 come from the weights one
    update old, so the run differs, and it is the same run twice (never thread timing)."""
    from parpo.policy.llm.trainer import LLMTrainer

    joint = LLMTrainer(_cfg(tiny_llm, "train.order=joint"), source, tmp_path / "joint").fit()
    fresh = LLMTrainer(_cfg(tiny_llm, "train.max_staleness=0"), source, tmp_path / "fresh").fit()
    assert _same(_weights(joint), _weights(fresh))
    assert [m["queue/staleness"] for m in fresh.history] == [0, 0, 0]
    assert "queue/staleness" not in joint.history[0]

    one = LLMTrainer(_cfg(tiny_llm), source, tmp_path / "one").fit()
    two = LLMTrainer(_cfg(tiny_llm), source, tmp_path / "two").fit()
    assert [m["queue/staleness"] for m in one.history] == [0, 1, 1]
    assert all(m["queue/wait_s"] >= 0 for m in one.history)
    assert _same(_weights(one), _weights(two))
    assert not _same(_weights(one), _weights(joint))


def test_a_resumed_run_draws_the_same_tasks(tiny_llm, source, tmp_path, monkeypatch) -> None:
    """The checkpoint holds the generators as they were before the next batch, not as the thread
    left them; the batch in flight is generated again with the resumed weights (staleness 0)."""
    import parpo.policy.llm.trainer as trainer
    from tests.plugins.policies import record_drawn_tasks

    drawn = record_drawn_tasks(monkeypatch, trainer)
    straight = trainer.LLMTrainer(_cfg(tiny_llm), source, tmp_path / "a").fit()
    straight_tasks, drawn[:] = list(drawn), []
    trainer.LLMTrainer(_cfg(tiny_llm, "train.updates=1"), source, tmp_path / "b").fit()
    first, drawn[:] = list(drawn), []
    resumed = trainer.LLMTrainer(_cfg(tiny_llm), source, tmp_path / "b").fit(resume=tmp_path / "b" / LAST)
    assert first == straight_tasks[:1] and drawn == straight_tasks[1:]
    assert [m["update"] for m in resumed.history] == [1, 2, 3]
    assert [m["queue/staleness"] for m in straight.history] == [0, 1, 1]
    assert [m["queue/staleness"] for m in resumed.history] == [0, 0, 1]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["policy.engine=vllm", "loss.tis=true"], "train.order single_rollout generates in a thread"),
        (["rollout.workers=2"], "train.order single_rollout generates in a thread"),
        (["policy.memory_skills=2"], "does not take the skill memory"),
        (["advantage.estimator=parpo"], "needs a value-based advantage.estimator"),
    ],
)
def test_single_rollout_configs_it_cannot_run_are_one_line(tiny_llm, extra, message) -> None:
    with pytest.raises(Exception, match=message):
        _cfg(tiny_llm, *extra)
