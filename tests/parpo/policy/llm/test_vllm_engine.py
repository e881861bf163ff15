"""The vllm engine without vLLM: its request and answer adaptations on hand-built inputs and its
config checks (``test_vllm_cpu.py`` runs the engine itself, opt-in)."""

from __future__ import annotations

from collections import namedtuple

import pytest

from parpo.env.schema import action_json_schema
from parpo.policy.llm.config import LLMPolicyConfig, LLMTrainConfig
from parpo.policy.llm.vllm_engine import generation_of, lora_rank, prompt_logprobs_of, sampling_kwargs
from parpo_core.errors import UserError

LP = namedtuple("LP", "logprob")  # vLLM's Logprob: the fields the engine reads


def test_each_row_is_one_request_with_its_seed_budget_and_stop_ids() -> None:
    kw = sampling_kwargs(5, 42, temperature=0.7, greedy=False, stop_ids=[7, 2], guided=False)
    assert kw == {
        "n": 1,
        "max_tokens": 5,
        "temperature": 0.7,
        "top_k": 0,
        "top_p": 1.0,
        "seed": 42,
        "logprobs": 0,
        "stop_token_ids": [2, 7],
        "skip_special_tokens": False,
        "detokenize": False,
    }
    assert (
        sampling_kwargs(5, 42, temperature=0.7, greedy=True, stop_ids=[2], guided=False)["temperature"] == 0.0
    )
    guided = sampling_kwargs(5, 42, temperature=0.7, greedy=False, stop_ids=[2], guided=True)
    assert guided["structured_outputs"] == {"json": action_json_schema()}


def test_a_completion_becomes_a_generation_cut_at_its_stop_token_and_budget() -> None:
    tokens = [5, 9, 2, 11]
    logprobs = [{5: LP(-0.1)}, {9: LP(-0.2)}, {2: LP(-0.3)}, {11: LP(-0.4)}]
    g = generation_of(tokens, logprobs, frozenset({2}), 10)
    assert (g.tokens, g.logp) == ([5, 9, 2], [pytest.approx(-0.1), pytest.approx(-0.2), pytest.approx(-0.3)])
    g = generation_of(tokens, logprobs, frozenset({2}), 2)
    assert (g.tokens, len(g.logp)) == ([5, 9], 2)
    with pytest.raises(ValueError, match="returned 3 log-probs for 4 tokens"):
        generation_of(tokens, logprobs[:3], frozenset({2}), 10)


def test_prompt_logprobs_are_those_of_the_tokens_after_the_first() -> None:
    got = prompt_logprobs_of([3, 4, 5], [None, {4: LP(-1.5)}, {5: LP(-0.5), 9: LP(-0.1)}])
    assert got == [-1.5, -0.5]
    with pytest.raises(ValueError, match="2 prompt log-probs for 3 tokens"):
        prompt_logprobs_of([3, 4, 5], [None, {4: LP(-1.5)}])


def test_the_lora_rank_is_the_smallest_vllm_accepts() -> None:
    assert [lora_rank(r) for r in (1, 4, 8, 9, 17, 512)] == [1, 8, 8, 16, 32, 512]
    with pytest.raises(UserError, match="above vLLM's largest LoRA rank 512"):
        lora_rank(513)


def test_schema_decoding_on_vllm_is_checked_in_the_config() -> None:
    with pytest.raises(ValueError, match="leave policy.call_prefix empty"):
        LLMPolicyConfig(engine="vllm", constrained_decoding=True, call_prefix='{"tool": "')
    with pytest.raises(ValueError, match="set loss.tis: true"):
        LLMTrainConfig.model_validate({"policy": {"engine": "vllm", "constrained_decoding": True}})
    LLMTrainConfig.model_validate(
        {"policy": {"engine": "vllm", "constrained_decoding": True}, "loss": {"tis": True}}
    )
