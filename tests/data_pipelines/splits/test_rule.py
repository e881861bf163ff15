import hashlib

import polars as pl
import pytest
from pydantic import ValidationError

from data_pipelines.schema import DEFAULT_POSITIVE_EVENTS
from data_pipelines.splits import PositivesRule


def test_default_is_every_non_impression_event():
    rule = PositivesRule()
    assert rule.events == DEFAULT_POSITIVE_EVENTS
    assert "impression" not in rule.events and "rate" in rule.events
    assert rule.min_value is None


def test_rule_hash_is_sha256_of_canonical_json():
    text = '{"events":["view","click","cart","fav","buy","rate"],"min_value":null,"weights":{}}'
    assert PositivesRule().rule_hash() == hashlib.sha256(text.encode()).hexdigest()[:12]


def test_rule_hash_ignores_order_and_unit_weights_but_not_content():
    a = PositivesRule(events=("buy", "click"))
    assert a.rule_hash() == PositivesRule(events=("click", "buy")).rule_hash()
    assert a.rule_hash() == PositivesRule(events=("click", "buy"), weights={"buy": 1.0}).rule_hash()
    assert a.rule_hash() != PositivesRule(events=("click", "buy"), weights={"buy": 2.0}).rule_hash()
    assert a.rule_hash() != PositivesRule(events=("click", "buy"), min_value=4).rule_hash()
    assert a.rule_hash() != PositivesRule().rule_hash()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"events": ("clicks",)},
        {"events": ()},
        {"events": ("click",), "weights": {"buy": 2.0}},
        {"weights": {"buy": 0.0}},
        {"min_value": float("nan")},
        {"unknown": 1},
    ],
)
def test_bad_rules_are_refused(kwargs):
    with pytest.raises(ValidationError):
        PositivesRule(**kwargs)


def test_is_positive_and_weight():
    df = pl.DataFrame(
        {
            "event": ["impression", "click", "rate", "rate", "buy"],
            "value": [None, None, 3.0, 4.0, None],
        }
    )
    rule = PositivesRule(min_value=4, weights={"buy": 3.0})
    # min_value filters rows that carry a value; a click without one still counts.
    assert df.select(rule.is_positive()).to_series().to_list() == [False, True, False, True, True]
    assert df.select(rule.weight()).to_series().to_list() == [1.0, 1.0, 1.0, 1.0, 3.0]
    assert df.select(PositivesRule().is_positive()).to_series().to_list() == [False, True, True, True, True]
