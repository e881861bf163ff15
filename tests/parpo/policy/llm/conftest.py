"""The hand-made environment and the tiny LLM policy on it; a scripted engine for exact turns."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from parpo.env import BatchEnv, EnvConfig
from parpo.policy.llm.config import LLMPolicyConfig
from parpo.policy.llm.engine import Generation
from tests.plugins.envs import HandUsers, hand_catalogue

pytestmark = pytest.mark.llm


@pytest.fixture
def hand_env() -> BatchEnv:
    return BatchEnv(hand_catalogue(), HandUsers(), EnvConfig(k=3, max_steps=3, search_k=6))


@pytest.fixture
def llm_policy(tiny_llm):
    from parpo.policy.llm.policy import LLMPolicy

    cfg = LLMPolicyConfig(model=str(tiny_llm), max_new_tokens=40, max_context=4096, top_candidates=4)
    return LLMPolicy.create(cfg, HandUsers(), hand_catalogue())


class ScriptedEngine:
    """Writes the next text of ``script`` (per call, the same for every prompt), then the stop token."""

    def __init__(self, tokenizer, script: Sequence[str]) -> None:
        self.tok, self.script, self.calls = tokenizer, list(script), 0

    def generate(self, prompts, budgets, *, temperature, greedy, generator=None) -> list[Generation]:
        text = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        ids = [*self.tok(text, add_special_tokens=False)["input_ids"], self.tok.eos_token_id]
        return [Generation(ids[:b], [-0.5] * min(b, len(ids))) for b in budgets]

    def sync(self, model) -> None:
        pass

    def score(self, ids) -> dict:
        return {}  # scripted: no weights, so no probe to check after a sync
