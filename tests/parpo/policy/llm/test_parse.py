"""JSON tool calls -> typed actions, or a string the env records as an invalid call."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parpo.env import BatchEnv, EnvConfig
from parpo.env.schema import Constraints, Filter, Recommend, Search
from parpo.policy.llm.parse import first_object, parse_call, resolve_ids
from tests.plugins.envs import HandUsers, hand_catalogue, hand_tasks

pytestmark = pytest.mark.llm
IDS = ["a1", "a0", "a2"]  # the latest result, best first: c1 = a1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"tool": "search", "category": "a", "strategy": "recency", "k": 5}',
         Search(category="a", strategy="recency", k=5)),
        ('{"tool": "filter", "constraints": {"price_max": 20}}', Filter(constraints=Constraints(price_max=20))),
        ('{"tool": "recommend", "items": ["c2", "c1"]}', Recommend(items=["a0", "a1"])),
        # prose around the object is ignored; the first object is the call
        ('Sure! {"tool": "recommend", "items": ["c3"]} hope that helps {"tool": "search"}',
         Recommend(items=["a2"])),
        # ids that are not short ids, or out of range, stay as written (the env counts them unknown)
        ('{"tool": "recommend", "items": ["b1", "c9", "c0"]}', Recommend(items=["b1", "c9", "c0"])),
    ],
)  # fmt: skip
def test_valid_calls_become_typed_actions(text: str, expected) -> None:
    assert parse_call(text, IDS) == expected


@pytest.mark.parametrize(
    ("text", "returned"),
    [
        ("I would search for shoes", "I would search for shoes"),  # no JSON at all
        ('{"tool": "search", "category": "a"', '{"tool": "search", "category": "a"'),  # truncated
        ('{"tool": "buy", "items": ["c1"]}', '{"tool": "buy", "items": ["c1"]}'),  # unknown tool
        ('x {"tool": "search", "k": 0} y', '{"tool": "search", "k": 0}'),  # bad argument: the object
        ("", ""),
    ],
)
def test_invalid_calls_return_a_string_for_the_env(text: str, returned: str) -> None:
    out = parse_call(text, IDS)
    assert isinstance(out, str)
    if returned.startswith("{") and returned.endswith("}"):
        assert json.loads(out) == json.loads(returned)
    else:
        assert out == returned


def test_the_env_records_each_invalid_call_with_its_reason_and_never_raises() -> None:
    env = BatchEnv(hand_catalogue(), HandUsers(), EnvConfig(k=3, max_steps=3, search_k=6))
    env.reset(hand_tasks())
    texts = ["no json here", '{"tool": "buy"}', '{"tool": "search", "k": 0}']
    obs, rewards, term, trunc, _ = env.step([parse_call(t, []) for t in texts])
    calls = [o.history[-1] for o in obs]
    assert [c.valid for c in calls] == [False, False, False]
    assert "not valid JSON" in calls[0].error
    assert calls[1].error.startswith("action: ") and "search" in calls[1].error  # names the known tools
    assert calls[2].error == "action: search.k: Input should be greater than or equal to 1"
    assert not term.any() and not trunc.any()


def test_first_object_skips_non_objects_and_broken_braces() -> None:
    assert first_object('[1, 2] {"a": 1}') == {"a": 1}
    assert first_object('{"a": } then {"b": 2}') == {"b": 2}
    assert first_object("{{{") is None
    assert resolve_ids("c1", IDS) == "c1"  # not a list: left for the schema to reject


@given(st.text(max_size=200))
def test_any_text_parses_to_an_action_or_a_string(text: str) -> None:
    out = parse_call(text, IDS)
    assert isinstance(out, Search | Filter | Recommend | str)


def test_the_profile_names_the_top_categories_and_attributes_of_the_highest_interest_items() -> None:
    import numpy as np

    from parpo.policy.llm.profile import summarise, top_names

    cat = hand_catalogue()  # rows a0 a1 a2 b0 b1 b2; HandReward's interest .2 .4 .6 .8 1 0
    interest = np.array([0.2, 0.4, 0.6, 0.8, 1.0, 0.0])
    scored = np.ones(6, dtype=bool)
    # the two most interesting items are b1 (red) and b0 (big): category b; attributes tie -> alphabetical
    p = summarise(cat, interest, scored, n_items=2, n_categories=3, n_attributes=5, cold=True)
    assert (p.categories, p.attributes, p.cold) == (("b",), ("big", "red"), True)
    # an item the model cannot score never votes
    scored[4] = False
    p = summarise(cat, interest, scored, n_items=1, n_categories=3, n_attributes=5, cold=False)
    assert (p.categories, p.attributes) == (("b",), ("big",))
    assert top_names(["x", "y", "y", "z", "x"], 2) == ("x", "y")
