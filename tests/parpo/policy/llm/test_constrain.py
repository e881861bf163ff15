"""Constrained decoding: the character-level checker against the action schema (accepts valid
calls to the end, rejects a bad one where it goes wrong, the shortest completion is exact), the
token masks with their budget guard (a hand-made vocabulary), and on the tiny model: every
constrained call parses where unconstrained ones do not, and the trainer's log-probs are the
engine's (same masks)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from parpo.env.schema import (
    Constraints,
    Filter,
    Recommend,
    Search,
    action_json_schema,
    action_to_json,
    parse_action,
)
from parpo.policy.llm.config import LLMPolicyConfig
from parpo.policy.llm.constrain import (
    DONE,
    ToolCallConstraint,
    alphabet,
    compile_schema,
    feed,
    initial,
    remaining,
    step,
)
from parpo_core.errors import UserError

ROOT = compile_schema(action_json_schema())
START = initial(ROOT)


@pytest.mark.parametrize(
    "text",
    [
        '{"tool":"search"}',
        '{"tool": "search", "category": "a", "k": 6}',
        '{"tool":"filter","constraints":{}}',
        '{"tool":"recommend","items":["c1"]}',
        '{"tool": "filter", "constraints": {"price_min": 5, "price_max": 5.5}}',
        json.dumps(action_to_json(Search(category=None, strategy="price_asc", attributes=["x"], k=100))),
        json.dumps(action_to_json(Filter(constraints=Constraints(price_max=0.07, attributes=["big"])))),
        json.dumps(action_to_json(Recommend(items=["a0", "b 1"])), indent=2),
    ],
)
def test_valid_actions_are_accepted_to_the_end(text) -> None:
    state = START
    for i, ch in enumerate(text):
        assert remaining(state) <= len(text) - i  # never more than this very completion
        state = step(state, ch)
        assert state is not None, text[: i + 1]
    assert state == DONE and remaining(state) == 0
    parse_action(text)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"items":', 2),  # tool comes first
        ('{"tool":"dance"', 9),  # no such tool
        ('{"tool":"search","k":0', 21),  # k >= 1
        ('{"tool":"search","k":101', 23),  # k <= 100
        ('{"tool":"search","k":1,"k"', 24),  # each key once
        ('{"tool":"search","k":1.5', 22),  # k is an integer
        ('{"tool":"filter","constraints":{"price_min":5,"price_max":4}', 59),  # price_min <= price_max
        ('{"tool":"filter","constraints":{"price_min":-1', 44),  # prices >= 0
        ('{"tool":"recommend","items":[]', 29),  # at least one item
        ('{"tool":"search","category":"a\\', 30),  # no escapes
        ('{"tool":"search"}}', 17),  # nothing after the action
    ],
)
def test_a_bad_call_is_rejected_where_it_goes_wrong(text, where) -> None:
    state = feed(START, text[:where])
    assert state is not None and step(state, text[where]) is None


def _shortest(state, limit: int) -> int | None:
    """Breadth-first over the characters a completion may use ('x' stands for free text)."""
    chars = sorted(alphabet(ROOT) | {"x"})
    frontier, seen = {state}, {state}
    for depth in range(limit + 1):
        if DONE in frontier:
            return depth
        frontier = {n for s in frontier for c in chars if (n := step(s, c)) is not None} - seen
        seen |= frontier
    return None


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("", 17),  # {"tool":"search"}
        ('{"tool":"', 8),  # search"}
        ('{"tool":"f', 24),  # ilter","constraints":{}}
        ('{"tool":"recommend","items":[', 4),  # ""]}
        ('{"tool":"filter","constraints":{"price_min":5,"price_max":4', 3),  # 0}}
        ('{"tool":"filter","constraints":{"price_min":5.25,"price_max":5.2', 3),  # 5}}
        ('{"tool":"filter","constraints":{"price_max":0.07,"price_min":0.0', 2),  # }}
    ],
)
def test_remaining_is_the_shortest_completion(prefix, expected) -> None:
    state = feed(START, prefix)
    assert remaining(state) == expected == _shortest(state, expected)


def test_a_schema_keyword_it_does_not_know_is_named() -> None:
    with pytest.raises(ValueError, match="schema keyword 'pattern'"):
        compile_schema({"type": "string", "pattern": "^a"})


def test_the_call_prefix_must_start_an_action() -> None:
    assert LLMPolicyConfig(constrained_decoding=True, call_prefix='{"tool": "').constrained_decoding
    with pytest.raises(ValidationError, match="call_prefix 'Answer:' cannot start a valid action"):
        LLMPolicyConfig(constrained_decoding=True, call_prefix="Answer:")
    LLMPolicyConfig(call_prefix="Answer:")  # without the constraint, any prefix


# -- tokens, on a hand-made vocabulary -------------------------------------------------------
SINGLES = [chr(c) for c in range(32, 127)]
MULTI = ['{"tool":"', "search", "filter", "recommend", '"}', '","', '":', ' "', "abc", 'c1"', '"]}', "\n"]
TEXTS = [*SINGLES, *MULTI, None]  # the last id: the stop token (its text is never generated)
STOP = len(TEXTS) - 1
ID = {t: i for i, t in enumerate(TEXTS) if t is not None}


def _ids(mask: np.ndarray) -> set[str]:
    return {TEXTS[i] if i != STOP else "<stop>" for i in np.flatnonzero(mask)}


def test_masks_keep_a_valid_prefix_that_fits_the_budget() -> None:
    c = ToolCallConstraint(TEXTS, [STOP])
    # 17 tokens left: the shortest action takes 17 characters, so only tokens that bring it
    # closer: "{" (16 left after it) and '{"tool":"' (8); a space would leave 17 > 16
    assert _ids(c.allowed(c.start, 17)) == {"{", '{"tool":"'}
    assert {" ", "\n", "{", '{"tool":"'} <= _ids(c.allowed(c.start, 18))
    after = feed(c.start, '{"tool":"search"')
    assert _ids(c.allowed(after, 1)) == {"}"}  # one token left: close it
    # 5 left: whitespace or the end; a comma needs a key and a value after it ("k":1}, 6 more)
    assert _ids(c.allowed(after, 5)) == {"}", " ", "\n"}
    assert "," not in _ids(c.allowed(after, 6)) and "," in _ids(c.allowed(after, 7))
    assert _ids(c.allowed(DONE, 5)) == {"<stop>"}  # a complete action ends the turn
    # one long token is one token: with 10 left '{"tool":"' (9 characters) still fits; with 8
    # nothing does, and the turn ends (an empty, invalid call)
    assert _ids(c.allowed(c.start, 10)) == {'{"tool":"'}
    assert _ids(c.allowed(c.start, 8)) == {"<stop>"}
    free = feed(c.start, '{"tool":"search","category":"')  # inside a free string
    assert {"abc", "search", "{", 'c1"', '"}', '","'} <= _ids(c.allowed(free, 40))
    assert '"]}' not in _ids(c.allowed(free, 40)) and "\n" not in _ids(c.allowed(free, 40))


def test_random_walks_under_the_masks_end_in_a_valid_call_within_the_budget() -> None:
    c = ToolCallConstraint(TEXTS, [STOP], prefix='{"tool": "')
    rng = np.random.default_rng(0)
    for _ in range(200):
        budget = int(rng.integers(8, 40))
        state, text, n = c.start, '{"tool": "', 0
        while n < budget:
            t = int(rng.choice(np.flatnonzero(c.allowed(state, budget - n))))
            n += 1
            if t == STOP:
                break
            text += TEXTS[t]
            state = c.advance(state, t)
        assert state == DONE, text
        parse_action(text)


def test_a_tokenizer_without_one_character_tokens_is_one_line() -> None:
    with pytest.raises(UserError, match="has none for"):
        ToolCallConstraint([t for t in TEXTS if t != "}"], [STOP - 1])


# -- the tiny model ---------------------------------------------------------------------------
def _policy(tiny_llm, constrained: bool):
    from parpo.policy.llm.policy import LLMPolicy
    from tests.plugins.envs import HandUsers, hand_catalogue

    cfg = LLMPolicyConfig(model=str(tiny_llm), max_new_tokens=40, top_candidates=4,
                          constrained_decoding=constrained)  # fmt: skip
    return LLMPolicy.create(cfg, HandUsers(), hand_catalogue())


@pytest.mark.llm
def test_every_constrained_call_parses_where_unconstrained_ones_do_not(tiny_llm, hand_env) -> None:
    """Two turns of 9 sampled episodes (the second after a tool result or an error)."""
    from tests.plugins.envs import hand_tasks

    rates = {}
    for constrained in (False, True):
        policy = _policy(tiny_llm, constrained)
        gen = torch.Generator().manual_seed(0)
        obs = hand_env.reset(hand_tasks() * 3)
        first = policy.act(obs, generator=gen).actions
        obs, *_ = hand_env.step(first)
        second = policy.act(obs, generator=gen).actions if obs else []
        rates[constrained] = np.mean([isinstance(a, str) for a in [*first, *second]])  # str: did not parse
    assert rates[True] == 0.0 and rates[False] > 0.5  # the random tiny model rarely writes an action


@pytest.mark.llm
def test_constrained_trainer_logprobs_equal_the_engines_within_1e_5(tiny_llm, hand_env) -> None:
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.policy.llm.logprobs import pad_batch
    from parpo.policy.llm.rollout import run_episodes
    from parpo.policy.llm.trainer import behaviour_scores, training_batch
    from tests.plugins.envs import hand_tasks

    policy = _policy(tiny_llm, True)
    convs, _, _ = run_episodes(policy, hand_env, hand_tasks() * 2, generator=torch.Generator().manual_seed(1))
    b = pad_batch(convs, policy.pad_id)
    old = behaviour_scores(policy, b, micro_batch_size=2)[0]
    assert int(b["mask"].sum()) > 30
    assert (old - b["rollout_logp"])[b["mask"]].abs().max().item() <= 1e-5
    # without the masks the trainer would score another distribution: the gap is real
    from parpo.policy.llm.logprobs import token_logprobs

    with torch.no_grad():
        free, _ = token_logprobs(policy.model, b["ids"], b["attention"], b["mask"], policy.temperature)
    assert (free - b["rollout_logp"])[b["mask"]].abs().max().item() > 0.1
    # through act (serving, evaluation) too, on the second turn of each episode
    gen = torch.Generator().manual_seed(2)
    obs = hand_env.reset(hand_tasks())
    first = policy.act(obs, generator=gen)
    obs, *_ = hand_env.step(first.actions)
    second = policy.act(obs, generator=gen)
    lp, _ = policy.logprobs(second.inputs, second.tokens)
    assert (lp - second.logprobs)[second.mask].abs().max().item() <= 1e-5
    cfg = LLMTrainConfig.model_validate({"policy": {"model": str(tiny_llm)}, "loss": {"tis": True}})
    batch = training_batch(policy, convs, cfg)
    assert torch.allclose(batch["is_weights"][b["mask"]], torch.ones(int(b["mask"].sum())), atol=1e-4)
