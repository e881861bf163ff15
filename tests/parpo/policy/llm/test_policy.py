"""The LLM policy on the hand-made environment: rendering, masks, log-prob parity, context cuts,
episodes carried across turns, and the env's invalid-call path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from parpo.env.schema import Recommend, Search
from parpo.policy.llm.logprobs import token_logprobs
from parpo.policy.llm.rollout import run_episodes
from tests.parpo.policy.llm.conftest import ScriptedEngine
from tests.plugins.envs import hand_tasks

pytestmark = pytest.mark.llm
GOLDEN = Path(__file__).parent / "golden"


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("PARPO_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; rerun with PARPO_UPDATE_GOLDEN=1 if on purpose"


def test_rendering_matches_the_golden_files(llm_policy, hand_env) -> None:
    """First prompt (rules + schema, profile from the reward model, request) and the tool message
    after a search (short ids, best first, cut to ``top_candidates``)."""
    llm_policy.engine = ScriptedEngine(llm_policy.tokenizer, ['{"tool": "search", "category": "a", "k": 6}'])
    obs = hand_env.reset(hand_tasks()[:1])
    first = llm_policy.start(obs)[0]
    _golden("prompt.txt", first.prompt_text)
    out = llm_policy.act(obs)
    assert out.actions == [Search(category="a", k=6)]
    obs, *_ = hand_env.step(out.actions)
    conv = llm_policy.conversations(obs)[0]
    _golden("after_search.txt", conv.prompt_text)
    # all six items are among the top 50 by interest: category a has 3, b 2; red 3 (a0 a1 b1), big 2
    assert (
        '"profile":{"top_categories":["a","b"],"top_attributes":["red","big"],"cold":false}'
        in first.prompt_text
    )
    # the sequence decodes to the rendered text: the growing ids and the template agree
    decoded = llm_policy.tokenizer.decode(conv.ids, skip_special_tokens=False)
    assert decoded == conv.prompt_text


class Recording:
    """Wraps an engine and keeps each prompt's generated tokens, by the prompt's ids."""

    def __init__(self, engine) -> None:
        self.engine, self.turns = engine, {}

    def generate(self, prompts, budgets, **kw):
        gens = self.engine.generate(prompts, budgets, **kw)
        for p, g in zip(prompts, gens, strict=True):
            self.turns[tuple(p)] = g.tokens
        return gens


def test_masks_cover_exactly_the_generated_tokens(llm_policy, hand_env) -> None:
    rec = llm_policy.engine = Recording(llm_policy.engine)
    convs, _, infos = run_episodes(
        llm_policy, hand_env, hand_tasks(), generator=torch.Generator().manual_seed(0)
    )
    for c, info in zip(convs, infos, strict=True):
        expected_mask, pos = [False] * len(c.ids), 0
        # walk the episode: each generated turn starts where the sequence so far was its prompt
        starts = [n for n in range(len(c.ids)) if tuple(c.ids[:n]) in rec.turns]
        assert len(starts) == info["steps"] == len(c.texts)
        for n in starts:
            gen = rec.turns[tuple(c.ids[:n])]
            assert c.ids[n : n + len(gen)] == gen
            expected_mask[n : n + len(gen)] = [True] * len(gen)
            pos = n + len(gen)
        assert c.mask == expected_mask and pos <= len(c.ids)
        assert all((x < 0) == m for x, m in zip(c.logp, c.mask, strict=True))


def test_trainer_logprobs_equal_the_engines_within_1e_5(llm_policy, hand_env) -> None:
    gen = torch.Generator().manual_seed(1)
    convs, _, _ = run_episodes(llm_policy, hand_env, hand_tasks(), generator=gen)
    from parpo.policy.llm.logprobs import pad_batch

    b = pad_batch(convs, llm_policy.pad_id)
    with torch.no_grad():
        logp, ent = token_logprobs(
            llm_policy.model, b["ids"], b["attention"], b["mask"], llm_policy.temperature
        )
    assert int(b["mask"].sum()) > 10
    gap = (logp - b["rollout_logp"])[b["mask"]].abs().max().item()
    assert gap <= 1e-5
    assert (logp[~b["mask"]] == 0).all() and (ent[b["mask"]] > 0).all()


def test_act_carries_each_episode_across_turns_and_scores_its_own_tokens(llm_policy, hand_env) -> None:
    """Through the generic ``act`` (serving, evaluation): the second turn continues the first
    turn's exact tokens, and ``logprobs`` of ``act``'s tokens equals its recorded log-probs."""
    gen = torch.Generator().manual_seed(2)
    obs = hand_env.reset(hand_tasks())
    first = llm_policy.act(obs, generator=gen)
    obs, *_ = hand_env.step(first.actions)
    second = llm_policy.act(obs, generator=gen)
    for i in range(len(obs)):
        n = int(first.inputs["attention"][i].sum())
        assert second.inputs["ids"][i, :n].tolist() == first.inputs["ids"][i, :n].tolist()
    lp, _ = llm_policy.logprobs(second.inputs, second.tokens)
    assert (lp - second.logprobs)[second.mask].abs().max().item() <= 1e-5
    assert second.mask.sum(1).tolist() == [len(t) for t in _generated(second)]


def _generated(out) -> list[list[int]]:
    rows = []
    for i in range(out.tokens.shape[0]):
        rows.append([t for t, m in zip(out.tokens[i].tolist(), out.mask[i].tolist(), strict=True) if m])
    return rows


def test_short_ids_reach_the_env_as_items_and_the_episode_ends_with_a_slate(llm_policy, hand_env) -> None:
    llm_policy.engine = ScriptedEngine(
        llm_policy.tokenizer,
        ['{"tool": "search", "category": "a", "strategy": "price_asc", "k": 6}',
         'Here: {"tool": "recommend", "items": ["c1", "c2", "c9"]}'],
    )  # fmt: skip
    convs, rewards, infos = run_episodes(llm_policy, hand_env, hand_tasks()[:1])
    # category a by ascending price: a0 (10), a2 (20), a1 (30); c9 does not exist -> unknown item
    assert infos[0]["slate"] == ["a0", "a2"] and infos[0]["unknown"] == 1
    assert infos[0]["plan"] == "search:price_asc>recommend"
    assert rewards["task/valid_calls"][0] == 1.0
    assert len(convs[0].texts) == 2


def test_invalid_calls_are_recorded_by_the_env_until_the_step_limit(llm_policy, hand_env) -> None:
    llm_policy.engine = ScriptedEngine(
        llm_policy.tokenizer, ["I think shoes", '{"tool": "dance"}', '{"tool":']
    )
    _, rewards, infos = run_episodes(llm_policy, hand_env, hand_tasks()[:1])
    assert infos[0]["plan"] == "invalid>invalid>invalid" and infos[0]["slate"] == []
    assert len(infos[0]["invalid"]) == 3 and rewards["task/valid_calls"][0] == 0.0


def test_a_tool_result_that_overflows_the_context_drops_the_lowest_ranked_candidates(
    llm_policy, hand_env
) -> None:
    llm_policy.engine = ScriptedEngine(llm_policy.tokenizer, ['{"tool": "search", "k": 6}'])
    obs = hand_env.reset(hand_tasks()[:1])
    prompt = llm_policy.start(obs)[0]
    # room for the prompt, the call and roughly two candidates, then the 40-token budget
    full = llm_policy.chat
    full.max_context = len(prompt.ids) + 40 + 60 + 40 + 60
    out = llm_policy.act(obs)
    obs, *_ = hand_env.step(out.actions)
    conv = llm_policy.conversations(obs)[0]
    shown = conv.messages[-1]["content"].count('"id":')
    assert 0 <= shown < 4 and conv.cut == 4 - shown
    assert '"id":"c1"' in conv.messages[-1]["content"] or shown == 0  # best-ranked kept first
    assert len(conv.ids) + full.max_new_tokens <= full.max_context or shown == 0
    # no room at all: the next turn has no budget, an empty call, and the env records it invalid
    full.max_context = len(conv.ids)
    out = llm_policy.act(obs)
    assert out.actions == [""] and out.mask.sum() == 0
    obs, *_ = hand_env.step(out.actions)
    assert obs[0].history[-1].valid is False


def test_greedy_decoding_is_deterministic(llm_policy, hand_env) -> None:
    obs = hand_env.reset(hand_tasks())
    a = llm_policy.act(obs, greedy=True)
    b = llm_policy.act(obs, greedy=True)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.mask, b.mask)
    assert not isinstance(a.actions[0], Recommend) or a.actions[0].items


def test_an_episode_it_did_not_produce_is_rendered_from_its_calls(llm_policy, hand_env) -> None:
    """After a restart (no episode in flight), the calls so far are re-rendered as canonical JSON,
    earlier results by their status, the latest with its candidates; nothing counts as generated."""
    script = ['{"tool": "filter", "constraints": {}}', '{"tool": "search", "category": "b", "k": 6}']
    llm_policy.engine = ScriptedEngine(llm_policy.tokenizer, script)
    obs = hand_env.reset(hand_tasks()[:1])
    for _ in script:
        obs, *_ = hand_env.step(llm_policy.act(obs).actions)
    kept = llm_policy.conversations(obs)[0]
    llm_policy._pending.clear()
    conv = llm_policy.conversations(obs)[0]
    assert [m["role"] for m in conv.messages] == [m["role"] for m in kept.messages]
    assert conv.messages[3]["content"] == '{"ok": false, "error": "filter before any search"}'
    assert (
        conv.messages[4]["content"]
        == '{"tool": "search", "category": "b", "strategy": "popularity", "constraints": {"price_min": null, "price_max": null, "attributes": []}, "attributes": [], "k": 6}'
    )
    assert conv.messages[-1] == kept.messages[-1]  # the latest result, candidates and all
    assert not any(conv.mask)
    assert llm_policy.tokenizer.decode(conv.ids, skip_special_tokens=False) == conv.prompt_text


def test_a_call_prefix_is_forced_not_sampled(tiny_llm, hand_env) -> None:
    from parpo.policy.llm.config import LLMPolicyConfig
    from parpo.policy.llm.policy import LLMPolicy
    from tests.plugins.envs import HandUsers, hand_catalogue

    prefix = '{"tool": "'
    cfg = LLMPolicyConfig(model=str(tiny_llm), max_new_tokens=40, top_candidates=4, call_prefix=prefix)
    policy = LLMPolicy.create(cfg, HandUsers(), hand_catalogue())
    policy.engine = ScriptedEngine(
        policy.tokenizer, ['search", "category": "a", "k": 6}', 'recommend", "items": ["c2"]}']
    )
    convs, _, infos = run_episodes(policy, hand_env, hand_tasks()[:1])
    c = convs[0]
    assert infos[0]["plan"] == "search:popularity>recommend" and infos[0]["slate"] == ["a0"]
    assert c.texts == [prefix + 'search", "category": "a", "k": 6}', prefix + 'recommend", "items": ["c2"]}']
    n = len(policy.chat.prefix_ids)
    starts = [j for j in range(1, len(c.mask)) if c.mask[j] and not c.mask[j - 1]]
    assert len(starts) == 2
    for j in starts:  # each call's prefix sits right before its generated tokens, masked out
        assert c.ids[j - n : j] == policy.chat.prefix_ids and not any(c.mask[j - n : j])
    decoded = policy.tokenizer.decode(c.ids, skip_special_tokens=False)
    assert decoded.startswith(c.prompt_text.split("<|im_start|>tool")[0])


def test_personal_scores_switch_off_and_earlier_policies_load_without_them(
    tiny_llm, hand_env, tmp_path
) -> None:
    """``personal_features: false`` (the ablation) shows catalogue fields only and no rule about
    them; a policy saved before the option existed was prompted without them and loads so."""
    import json

    from parpo.env.observation import PERSONAL_KEYS
    from parpo.policy.llm.config import LLMPolicyConfig
    from parpo.policy.llm.policy import LLMPolicy
    from parpo.policy.llm.prompt import PERSONAL_RULES
    from tests.plugins.envs import HandUsers, hand_catalogue

    cfg = LLMPolicyConfig(model=str(tiny_llm), max_new_tokens=40, top_candidates=4, personal_features=False)
    policy = LLMPolicy.create(cfg, HandUsers(), hand_catalogue())
    policy.engine = ScriptedEngine(policy.tokenizer, ['{"tool": "search", "category": "a", "k": 6}'])
    obs = hand_env.reset(hand_tasks()[:1])
    obs, *_ = hand_env.step(policy.act(obs).actions)
    conv = policy.conversations(obs)[0]
    assert PERSONAL_RULES not in conv.messages[0]["content"]
    first = json.loads(conv.messages[-1]["content"])["candidates"][0]
    assert first == {
        "id": "c1",
        "category": "a",
        "price": 30.0,
        "popularity": 9,
        "attributes": ["red", "big"],
    }
    policy.save(tmp_path / "pol")
    meta = json.loads((tmp_path / "pol" / "llm.json").read_text())
    del meta["config"]["personal_features"]
    (tmp_path / "pol" / "llm.json").write_text(json.dumps(meta))
    loaded = LLMPolicy.load(tmp_path / "pol", HandUsers(), hand_catalogue())
    assert loaded.cfg.personal_features is False and loaded.personal is None
    assert not set(PERSONAL_KEYS) & set(loaded.conversations(obs)[0].messages[-1]["content"].split('"'))
