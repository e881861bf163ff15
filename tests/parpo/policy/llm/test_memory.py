"""The skill graph memory on the LLM backend: retrieved skills' texts join the first message, the
trainer writes its episodes back, and the memory travels with the saved policy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from parpo.memory.config import MemoryConfig
from parpo.memory.graph import SkillGraph
from parpo.memory.policy_memory import PolicyMemory
from parpo.memory.scenario import Query
from parpo.memory.trajectory import Trajectory
from parpo.policy.llm.config import LLMPolicyConfig
from parpo.policy.llm.prompt import MEMORY_RULES
from tests.plugins.envs import HandUsers, hand_catalogue, hand_tasks
from tests.plugins.llm import RoutedEngine

pytestmark = pytest.mark.llm


class IndexedUsers(HandUsers):
    user_index = {"u1": 0, "u2": 1}


def test_retrieved_skills_texts_join_the_first_message_and_travel_with_the_policy(
    tiny_llm, hand_env, tmp_path
) -> None:
    from parpo.policy.llm.policy import LLMPolicy

    cfg = LLMPolicyConfig(model=str(tiny_llm), max_new_tokens=40, top_candidates=4, memory_skills=2)
    policy = LLMPolicy.create(cfg, IndexedUsers(), hand_catalogue())
    graph = SkillGraph(MemoryConfig())
    # u1 searched category a by price, then recommended 3: task quality ties the batch's (its
    # own) quantile and preference is above the anchor 0, so it is distilled
    t = Trajectory("x", 0, Query("a", 12.0), ("search:price_asc+c", "recommend"), "price_asc", True,
                   ("red",), 3, {"task_quality": 1.0, "preference": 0.9})  # fmt: skip
    assert (
        graph.write([t], anchors={"preference": (np.zeros(2), np.ones(2, dtype=np.int64))})["memory/skills"]
        == 1.0
    )
    # price band floor(log2(1 + 12)) = 3: caps 7-15
    text = (
        "for a, price cap 7-15: search by price_asc with constraints, then recommend; constrains; "
        "attributes red; slate of 3"
    )
    assert graph.text(0) == text and graph.describe(0)["text"] == text
    obs = hand_env.reset(hand_tasks()[:1])
    assert "skills" not in json.loads(policy.start(obs)[0].messages[1]["content"])  # no memory yet
    policy.memory = PolicyMemory(graph, IndexedUsers.user_index)
    conv = policy.start(obs)[0]
    assert MEMORY_RULES in conv.messages[0]["content"]
    assert json.loads(conv.messages[1]["content"])["skills"] == [text]
    assert policy.tokenizer.decode(conv.ids, skip_special_tokens=False) == conv.prompt_text
    # saved and loaded with the policy (parquet, the text column), the same first message
    policy.save(tmp_path / "pol")
    loaded = LLMPolicy.load(tmp_path / "pol", IndexedUsers(), hand_catalogue())
    assert loaded.memory is not None and loaded.start(obs)[0].messages == conv.messages


def test_llm_training_writes_episodes_back_and_later_prompts_show_skills(
    tiny_llm, source, tmp_path, monkeypatch
) -> None:
    from transformers import AutoTokenizer

    from parpo.policy.llm import engine
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.policy.llm.policy import LLMPolicy
    from parpo.policy.llm.trainer import LLMTrainer

    routed = RoutedEngine(AutoTokenizer.from_pretrained(tiny_llm))
    monkeypatch.setitem(engine.ENGINES, "hf", lambda *a, **k: routed)
    cfg = LLMTrainConfig.model_validate(
        {
            "runtime": {"threads": 1, "device": "cpu"},
            "env": {"max_steps": 2},
            "policy": {
                "model": str(tiny_llm),
                "max_new_tokens": 160,
                "top_candidates": 4,
                "memory_skills": 2,
            },
            "train": {"updates": 2, "tasks_per_update": 4, "group_size": 2, "progress_bar": False},
        }
    )
    res = LLMTrainer(cfg, source, tmp_path / "run").fit()
    first, second = res.history
    assert first["memory/hit_rate"] == 0.0 and first["memory/skills"] > 0  # nothing to retrieve yet
    assert first["memory/high_value"] >= first["memory/skills"]
    assert second["memory/hit_rate"] > 0  # the second update's tasks retrieve the first's skills
    shown = [p for p in routed.prompts if '"skills":["for ' in p]
    assert shown and len(shown) < len(routed.prompts)  # only after the first write-back
    assert res.policy.memory is not None and len(res.policy.memory.graph) == second["memory/skills"]
    res.policy.save(tmp_path / "pol")
    loaded = LLMPolicy.load(tmp_path / "pol", source.reward_model, source.catalogue)
    assert loaded.memory is not None and len(loaded.memory.graph) == second["memory/skills"]


def test_more_skills_shown_than_one_retrieval_returns_is_one_config_error():
    from pydantic import ValidationError

    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.trainer.config import PolicyTrainConfig

    bad = {"policy": {"memory_skills": 5}, "memory": {"k": 4}}
    for model in (LLMTrainConfig, PolicyTrainConfig):  # both backends, one rule
        with pytest.raises(
            ValidationError, match=r"policy.memory_skills \(5\) must be at most memory.k \(4\)"
        ):
            model.model_validate(bad)
        assert model.model_validate({"policy": {"memory_skills": 4}, "memory": {"k": 4}}).memory.k == 4
