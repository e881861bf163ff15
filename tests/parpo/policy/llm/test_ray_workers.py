"""Ray rollout workers: 2 local CPU workers generate the same episodes as the trainer's process
for the same seed; a weight sync (full, or LoRA adapters only) brings their probe log-probs to
the trainer's; a dead worker or a sync past its timeout is one line naming the worker."""

from __future__ import annotations

import sys

import pytest
import torch

from parpo.policy.llm.config import LLMTrainConfig
from parpo.policy.llm.rollout import run_episodes
from parpo.policy.llm.sync import EngineSyncError, check_gaps, probe_gaps, probe_ids, sync_engine
from tests.plugins.envs import HandUsers, hand_catalogue, hand_tasks

pytestmark = [pytest.mark.llm, pytest.mark.ray]


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'parpo[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _cfg(tiny_llm, **policy) -> LLMTrainConfig:
    return LLMTrainConfig.model_validate(
        {
            "policy": {"model": str(tiny_llm), "max_new_tokens": 24, "top_candidates": 4, **policy},
            "rollout": {"workers": 2, "probe_tolerance": 1e-5},
        }
    )


def _policy(cfg):
    from parpo.policy.llm.policy import LLMPolicy

    torch.manual_seed(0)
    return LLMPolicy.create(cfg.policy, HandUsers(), hand_catalogue())


def _episodes(policy, env, seed):
    return run_episodes(policy, env, hand_tasks(), generator=torch.Generator().manual_seed(seed))


def _gaps(policy, engine) -> dict[str, float]:
    from parpo.policy.llm.engine import probe_logprobs

    ids = probe_ids(policy.chat)
    return probe_gaps(probe_logprobs(policy.model, ids), engine.score(ids))


def _gap(policy, engine) -> float:
    return max(_gaps(policy, engine).values())


def test_two_workers_generate_the_episodes_of_one_process_and_follow_the_weights(
    local_ray, tiny_llm, hand_env
) -> None:
    from parpo.policy.llm.workers import start_workers

    cfg = _cfg(tiny_llm)
    policy = _policy(cfg)
    local = policy.engine
    here, here_rewards, _ = _episodes(policy, hand_env, 7)
    policy.engine = workers = start_workers(policy, cfg)
    try:
        assert len({local_ray.get(w.pid.remote()) for w in workers.workers}) == 2
        none = workers.generate([[1, 2], [3]], [0, 0], temperature=1.0, greedy=False)  # no budget: no call
        assert [(g.tokens, g.logp) for g in none] == [([], []), ([], [])]
        there, there_rewards, _ = _episodes(policy, hand_env, 7)
        assert sum(sum(c.mask) for c in here) > 30  # the 3 episodes sampled something
        for a, b in zip(here, there, strict=True):
            assert a.ids == b.ids and a.mask == b.mask and a.texts == b.texts
            assert max(abs(x - y) for x, y in zip(a.logp, b.logp, strict=True)) <= 1e-5
        for k, v in here_rewards.items():
            assert v.tolist() == there_rewards[k].tolist()
        # another seed samples other episodes: the equality above is not one of constants
        other, _, _ = _episodes(policy, hand_env, 8)
        assert [c.ids for c in other] != [c.ids for c in there]

        with torch.no_grad():  # an update the workers have not seen
            for p in policy.model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        assert _gap(policy, workers) > 1e-2
        m = sync_engine(workers, policy.model, policy.chat, cfg.rollout.probe_tolerance)
        assert m["llm/sync_probe_gap"] <= 1e-5 and _gap(policy, workers) <= 1e-5
        synced, _, _ = _episodes(policy, hand_env, 9)
        policy.engine = local
        assert [c.ids for c in synced] == [c.ids for c in _episodes(policy, hand_env, 9)[0]]

        # a stale worker fails the probe check by name (the tolerance is the test's, 1e-5)
        with torch.no_grad():
            policy.model.lm_head.weight.mul_(1.5)
        gaps = _gaps(policy, workers)
        assert list(gaps) == ["rollout worker 0", "rollout worker 1"] and min(gaps.values()) > 1e-2
        with pytest.raises(
            EngineSyncError, match=r"^rollout worker 0: log-probs of the probe sequence differ"
        ):
            check_gaps(gaps, 1e-5)

        workers.timeout_s = 1e-9  # nothing answers within a nanosecond
        with pytest.raises(
            EngineSyncError, match=r"^rollout worker 0: no answer to the weight sync within 1e-09 s"
        ):
            workers.sync(policy.model)
        workers.timeout_s = 60.0
        local_ray.kill(workers.workers[1])
        with pytest.raises(EngineSyncError, match=r"^rollout worker 1 died \(during the weight sync\)$"):
            workers.sync(policy.model)
    finally:
        workers.close()


def test_a_lora_run_on_workers_syncs_the_adapters_only_after_each_update(
    local_ray, tiny_llm, source, tmp_path
) -> None:
    from parpo.policy.llm.engine import HFEngine
    from parpo.policy.llm.trainer import LLMTrainer
    from parpo.policy.llm.workers import sync_weights

    cfg = LLMTrainConfig.model_validate(
        {
            "runtime": {"threads": 1, "device": "cpu"},
            "env": {"max_steps": 2},
            "policy": {
                "model": str(tiny_llm),
                "max_new_tokens": 32,
                "top_candidates": 4,
                "lora": {"r": 4},
                "constrained_decoding": True,
            },
            "optim": {"lr": 1e-2},
            "train": {"updates": 2, "tasks_per_update": 2, "group_size": 2, "progress_bar": False},
            "rollout": {"workers": 2, "probe_tolerance": 1e-5},
        }
    )
    res = LLMTrainer(cfg, source, tmp_path / "run").fit()
    sent = sync_weights(res.policy.model)
    assert len(sent) == 16 and all("lora_" in k for k in sent)  # 2 layers x 4 projections x (A, B)
    # B starts at 0; constrained calls vary in validity, so the advantages are not all 0 and it trained
    assert any(float(v.abs().sum()) > 0 for k, v in sent.items() if "lora_B" in k)
    # each update's sync was checked: the workers scored the probe as the updated trainer did
    assert [h["llm/sync_probe_gap"] <= 1e-5 for h in res.history] == [True, True]
    assert isinstance(res.policy.engine, HFEngine)  # the workers are gone; the policy acts here


def test_workers_with_an_engine_other_than_hf_are_one_config_line(tiny_llm) -> None:
    with pytest.raises(
        ValueError, match="rollout.workers > 0 runs hf engines in Ray workers; policy.engine vllm"
    ):
        _cfg(tiny_llm, engine="vllm")


def test_workers_without_the_ray_extra_are_one_line(monkeypatch) -> None:
    from parpo.policy.llm.workers import require_ray
    from parpo_core.errors import UserError

    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without ray imports
    with pytest.raises(
        UserError, match=r"^rollout.workers > 0 needs the ray extra: pip install 'parpo\[ray\]'"
    ):
        require_ray()
