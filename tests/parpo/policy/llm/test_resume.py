"""The LLM trainer resumes exactly: 1 update + resume + 1 update is the 2-update run, bit for bit
(LoRA adapters, value head, optimiser states, anchors, generators, the memory and the metrics
log); a checkpoint of another backend or policy config, or one whose memory is out of step, is
refused in one line."""

from __future__ import annotations

import shutil

import polars as pl
import pytest
import torch

from parpo.trainer.checkpoint import LAST
from parpo_core.errors import DataError, UserError
from tests.plugins.llm import RoutedEngine

pytestmark = pytest.mark.llm


def _cfg(tiny_llm, updates: int, lora: int = 4):
    from parpo.policy.llm.config import LLMTrainConfig

    return LLMTrainConfig.model_validate(
        {
            "runtime": {"threads": 1, "device": "cpu"},
            "env": {"max_steps": 2},
            "advantage": {"estimator": "gae"},  # a value head, trained with the adapters
            "policy": {
                "model": str(tiny_llm),
                "max_new_tokens": 160,
                "top_candidates": 4,
                "memory_skills": 2,
                "lora": {"r": lora},
            },  # fmt: skip
            "train": {
                "updates": updates,
                "tasks_per_update": 2,
                "group_size": 2,
                "minibatches": 2,
                "checkpoint_every": 1,
                "progress_bar": False,
            },  # fmt: skip
        }
    )


def test_one_update_resumed_and_one_more_is_the_two_update_run(
    tiny_llm, source, tmp_path, monkeypatch
) -> None:
    from transformers import AutoTokenizer

    from parpo.policy.llm import engine
    from parpo.policy.llm.trainer import LLMTrainer, trainable
    from parpo.trainer.loop import PolicyTrainer
    from tests.plugins.policies import fast_config

    # the strategy of each search is drawn from the rollouts' generator: its state must resume too
    routed = RoutedEngine(AutoTokenizer.from_pretrained(tiny_llm), ("popularity", "price_asc"))
    monkeypatch.setitem(engine.ENGINES, "hf", lambda *a, **k: routed)
    a, b = tmp_path / "a", tmp_path / "b"
    straight = LLMTrainer(_cfg(tiny_llm, 2), source, a).fit()
    LLMTrainer(_cfg(tiny_llm, 1), source, b).fit()
    after_one = torch.load(b / "update-1.ckpt", weights_only=True)["model"]
    resumed = LLMTrainer(_cfg(tiny_llm, 2), source, b).fit(resume=b / LAST)

    want, got = trainable(straight.policy).state_dict(), trainable(resumed.policy).state_dict()
    assert want.keys() == got.keys() and any(k.startswith("value_head.") for k in want)
    assert [k for k in want if not torch.equal(want[k], got[k])] == []
    assert any(not torch.equal(after_one[k], got[k].cpu()) for k in after_one)  # the second update moved them
    torch.testing.assert_close(resumed.anchors.state_dict(), straight.anchors.state_dict(), rtol=0, atol=0)
    for name in ("skills", "scenarios", "used", "links", "trajectories", "users"):
        assert pl.read_parquet(b / "memory" / f"{name}.parquet").equals(
            pl.read_parquet(a / "memory" / f"{name}.parquet")
        ), name
    assert (b / "memory" / "memory.json").read_text() == (a / "memory" / "memory.json").read_text()
    timed = ("time/", "throughput/")
    la, lb = (pl.read_csv(r / "logs" / "metrics.csv") for r in (a, b))
    la, lb = (x.select([c for c in x.columns if not c.startswith(timed)]) for x in (la, lb))
    assert lb["update"].to_list() == [1, 2] and lb.equals(la)
    assert la["memory/skills"][-1] > 0 and la["memory/hit_rate"][-1] > 0
    assert {p.name for p in b.iterdir()} >= {
        LAST,
        "memory",
        "update-1.ckpt",
        "update-1.memory",
        "update-2.ckpt",
    }

    # another policy config's or backend's checkpoint: one line, before any training
    with pytest.raises(UserError, match=r"last.ckpt: the checkpoint's policy config differs from this run's: "
                                        r"policy.lora.r \(4 there, 8 here\); resume with the config"):  # fmt: skip
        LLMTrainer(_cfg(tiny_llm, 2, lora=8), source, tmp_path / "c").fit(resume=b / LAST)
    with pytest.raises(
        UserError, match=r"a checkpoint of the llm policy backend, but this run trains the native"
    ):
        PolicyTrainer(fast_config(updates=2), source, tmp_path / "c").fit(resume=b / LAST)
    torch.save({"model": {}, "update": 1}, tmp_path / "native.ckpt")  # a native checkpoint before headers
    with pytest.raises(
        UserError, match=r"native.ckpt: a checkpoint of the native policy backend, but this run"
    ):
        LLMTrainer(_cfg(tiny_llm, 2), source, tmp_path / "c").fit(resume=tmp_path / "native.ckpt")
    # a checkpoint without its memory would resume from an empty one: refused
    shutil.rmtree(b / "update-1.memory")
    with pytest.raises(
        DataError, match=r"update-1.memory: the memory is at clock 0 but the checkpoint \(update 1\)"
    ):
        LLMTrainer(_cfg(tiny_llm, 2), source, tmp_path / "c").fit(resume=b / "update-1.ckpt")


class _CopyEngine:
    """An engine with its own copy of the weights (as vllm and Ray workers have); ``stale``: its
    ``sync`` loads nothing."""

    def __init__(self, model, pad_id, stop_ids, constraint=None, cfg=None, *, stale: bool) -> None:
        import copy

        from parpo.policy.llm.engine import HFEngine

        self.inner, self.stale = HFEngine(copy.deepcopy(model), pad_id, stop_ids, constraint), stale

    def generate(self, *a, **k):
        return self.inner.generate(*a, **k)

    def sync(self, model) -> None:
        if not self.stale:
            self.inner.model.load_state_dict(model.state_dict())

    def score(self, ids) -> dict:
        from parpo.policy.llm.engine import probe_logprobs

        return {"engine copy": probe_logprobs(self.inner.model, ids)}


def test_a_resume_checks_the_engines_weights_on_the_probe_before_the_first_rollout(
    tiny_llm, source, tmp_path, monkeypatch
) -> None:
    """An engine holding its own weights must take the resumed ones: one that did not (here its
    sync loads nothing, so it still has the initial weights) stops the resume in one line before
    any episode is generated; one that did resumes."""
    import parpo.policy.llm.trainer as trainer
    from parpo.policy.llm import engine
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.policy.llm.sync import EngineSyncError

    def cfg(updates: int) -> LLMTrainConfig:
        return LLMTrainConfig.model_validate(
            {
                "runtime": {"threads": 1},
                "env": {"max_steps": 2},
                "policy": {"model": str(tiny_llm), "max_new_tokens": 160, "top_candidates": 4},
                "optim": {"lr": 0.01},
                "rollout": {"probe_tolerance": 1e-6},
                "train": {"updates": updates, "tasks_per_update": 2, "group_size": 2, "progress_bar": False},
            }
        )

    from transformers import AutoTokenizer

    # the first update: calls with rewards that differ within groups, so the weights move
    routed = RoutedEngine(AutoTokenizer.from_pretrained(tiny_llm), ("popularity", "price_asc"))
    monkeypatch.setitem(engine.ENGINES, "hf", lambda *a, **k: routed)
    first = trainer.LLMTrainer(cfg(1), source, tmp_path / "run").fit()
    assert first.history[0]["actor/loss"] != 0
    rollouts = []
    real = trainer.collect
    monkeypatch.setattr(trainer, "collect", lambda *a, **k: rollouts.append(1) or real(*a, **k))
    monkeypatch.setitem(engine.ENGINES, "hf", lambda *a, **k: _CopyEngine(*a, **k, stale=True))
    with pytest.raises(EngineSyncError, match=r"^engine copy: log-probs of the probe sequence differ from the "
                                              r"trainer's by .* after the weight sync"):  # fmt: skip
        trainer.LLMTrainer(cfg(2), source, tmp_path / "run").fit(resume=tmp_path / "run" / LAST)
    assert rollouts == []
    monkeypatch.setitem(engine.ENGINES, "hf", lambda *a, **k: _CopyEngine(*a, **k, stale=False))
    res = trainer.LLMTrainer(cfg(2), source, tmp_path / "run").fit(resume=tmp_path / "run" / LAST)
    assert rollouts == [1] and [m["update"] for m in res.history] == [1, 2]
    assert res.history[-1]["llm/sync_probe_gap"] <= 1e-6
