"""The pieces of off-policy evaluation of a registry policy on server logs, by hand (the served
round trip against a known truth is ``tests/serving/test_ope_roundtrip.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from data_pipelines.adapters import open_source
from data_pipelines.ingest import ingest
from parpo.evaluation.ope.logs import read_logs
from parpo.evaluation.ope.policy import logged_requests, position_marginals, sampled_loggers
from parpo_core.errors import DataError


def _decision(rid: str, items: list[str], props: list[float], **kw) -> dict:
    return {
        "kind": "decision", "schema_version": 1, "ts": 1.7e9, "request_id": rid, "user_id": "u1",
        "request": {"category": "shoes", "constraints": {"price_min": None, "price_max": 50.0, "attributes": []},
                    "text": None},
        "candidates": None, "k": 2, "policy_version": "v1", "explore": 1.0, "n_samples": 4,
        "evaluable": True, "fallback": None,
        "slate": [{"item_id": i, "position": p + 1, "propensity": q} for p, (i, q) in enumerate(zip(items, props, strict=True))],
        **kw,
    }  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("served")
    decisions = [
        _decision("r1", ["a", "b"], [0.5, 0.25]),
        _decision("r2", ["b", "c"], [1.0, 1.0], evaluable=False, explore=0.0, n_samples=1),  # greedy
        _decision("r3", ["c"], [1.0], fallback="popularity"),
    ]
    events = [
        {
            "kind": "event",
            "schema_version": 1,
            "received": 1.7e9,
            "request_id": "r1",
            "position": 2,
            "event": "click",
        },
        {
            "kind": "event",
            "schema_version": 1,
            "received": 1.7e9,
            "request_id": "r1",
            "position": 1,
            "event": "buy",
            "value": 9.0,
        },
    ]
    for name, records in (("decisions", decisions), ("events", events)):
        (root / "ev" / name).mkdir(parents=True)
        (root / "ev" / name / "20261130T000000Z-1-ab-0001.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records)
        )
    ingest(open_source("parpo-events", root / "ev"), root / "ds")
    return root / "ds"


def test_only_sampled_decisions_are_evaluable_loggers(served):
    assert sampled_loggers(served) == ["v1"]  # not v1:greedy, not v1:popularity


def test_reward_is_the_feedback_event_at_the_impression(served):
    logs = read_logs(served, "v1", reward_event="click")
    got = sorted(zip(logs.request_ids, logs.position.tolist(), logs.reward.tolist(), logs.pscore.tolist(),
                     strict=True))  # fmt: skip
    assert got == [("r1", 0, 0.0, 0.5), ("r1", 1, 1.0, 0.25)]  # the buy at position 1 is not a click
    assert logs.user_ids == ["u1", "u1"]
    buys = read_logs(served, "v1", reward_event="buy")
    assert sorted(zip(buys.position.tolist(), buys.reward.tolist(), strict=True)) == [(0, 1.0), (1, 0.0)]


def test_logged_requests_replay_what_the_api_received(served):
    asked, n = logged_requests(served, ["r1", "r2"])
    assert asked["r1"] == {
        "category": "shoes", "constraints": {"price_min": None, "price_max": 50.0, "attributes": []},
        "text": None, "k": 2, "candidates": None,
    }  # fmt: skip
    assert n == {"r1": 4, "r2": 1}
    with pytest.raises(DataError, match="1 of 2 logged requests have no recorded request.*'ghost'"):
        logged_requests(served, ["r1", "ghost"])


def test_position_marginals_count_each_slot_over_the_samples():
    slates = [
        [["a", "b"], ["b", "a"], ["a"], ["a", "c"]],  # request 0: 4 samples
        [["c", "b"]],  # request 1: greedy, one sample
    ]
    index = {"a": 0, "b": 1, "c": 2}
    pi = position_marginals(slates, [(0, 0), (0, 1), (1, 1)], index)
    np.testing.assert_allclose(
        pi,
        [
            [0.75, 0.25, 0.0],  # position 1 of request 0: a in 3 of 4 samples
            [0.25, 0.25, 0.25],  # position 2: one sample's slate was too short (mass 0)
            [0.0, 1.0, 0.0],
        ],
    )


def test_a_reward_event_absent_from_the_logs_is_an_error_not_zeros(served):
    with pytest.raises(DataError, match="no 'clicks' events to use as the reward.*buy, click, impression"):
        read_logs(served, "v1", reward_event="clicks")


def test_greedy_or_fallback_loggers_are_refused(served):
    from parpo.evaluation.ope.policy import evaluate_served

    with pytest.raises(DataError, match="'v1:greedy' is a greedy or fallback one"):
        evaluate_served(served, bundle=None, logging_policies=["v1:greedy"])  # type: ignore[arg-type]
