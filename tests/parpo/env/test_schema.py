"""The action JSON Schema: export, round trip, errors that name the field."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parpo.env import (
    ACTION_SCHEMA_VERSION,
    ActionError,
    Constraints,
    Filter,
    Recommend,
    Search,
    action_json_schema,
    parse_action,
)
from parpo.env.schema import MAX_ITEMS, STRATEGIES, action_to_json


def test_schema_export_is_versioned_json():
    s = json.loads(json.dumps(action_json_schema()))
    assert s["version"] == ACTION_SCHEMA_VERSION and s["$id"].endswith(f"/v{ACTION_SCHEMA_VERSION}.json")
    assert s["discriminator"]["propertyName"] == "tool"
    assert set(s["discriminator"]["mapping"]) == {"search", "filter", "recommend"}
    defs = s["$defs"]
    assert all(
        defs[t]["required"][0] == "tool" and not defs[t]["additionalProperties"]
        for t in ("Search", "Filter", "Recommend")
    )
    assert defs["Search"]["properties"]["strategy"]["enum"] == list(STRATEGIES)
    assert defs["Search"]["properties"]["k"]["maximum"] == MAX_ITEMS
    assert defs["Recommend"]["properties"]["items"]["maxItems"] == MAX_ITEMS


names = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=8)
constraints = st.builds(
    Constraints,
    price_min=st.none() | st.floats(0, 50),
    price_max=st.none() | st.floats(50, 100),
    attributes=st.lists(names, max_size=3),
)
actions = st.one_of(
    st.builds(
        Search,
        category=st.none() | names,
        strategy=st.sampled_from(STRATEGIES),
        constraints=constraints,
        attributes=st.lists(names, max_size=3),
        k=st.integers(1, MAX_ITEMS),
    ),
    st.builds(Filter, constraints=constraints),
    st.builds(Recommend, items=st.lists(names, min_size=1, max_size=MAX_ITEMS)),
)


@given(actions)
def test_round_trip_through_json_text(action):
    assert parse_action(json.dumps(action_to_json(action))) == action


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"tool": "search", "k": 0}', "search.k"),
        ('{"tool": "search", "strategy": "cheapest"}', "search.strategy"),
        ('{"tool": "recommend", "items": []}', "recommend.items"),
        ('{"tool": "filter", "constraints": {"price_min": 5, "price_max": 1}}', "price_min (5.0) is above"),
        ('{"tool": "filter", "constraints": {}, "colour": "red"}', "filter.colour"),
        ('{"tool": "fly"}', "'fly'"),
        ('{"items": ["a"]}', "discriminator 'tool'"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_actions_name_the_field(raw, message):
    with pytest.raises(ActionError) as e:
        parse_action(raw)
    assert message in str(e.value) and "\n" not in str(e.value)
