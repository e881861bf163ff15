"""The retrain gate's checks and decision, on per-user differences worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from parpo.presets import ConfigError, load
from parpo.retrain.gate import Check, GateConfig, decide, judge

CFG = GateConfig(reward=[Check(set="new", metric="ndcg@10", margin=0.02)], n_boot=200, min_users=3)


def test_constant_difference_has_a_degenerate_interval():
    # every user 0.01 worse: the difference and both bounds are exactly -0.01
    prod = np.array([0.5, 0.3, 0.2, 0.4])
    r = judge(Check(set="new", metric="ndcg@10", margin=0.02), prod - 0.01, prod, CFG)
    assert r["diff"] == pytest.approx(-0.01) and r["ci_low"] == pytest.approx(-0.01)
    assert r["result"] == "pass" and "holds" in r["why"]  # -0.01 > -0.02
    r = judge(Check(set="new", metric="ndcg@10", margin=0.005), prod - 0.01, prod, CFG)
    assert r["result"] == "fail" and r["why"] == "new ndcg@10: ci_low -0.0100 > -0.005 fails"


def test_no_regression_looks_at_the_upper_bound():
    prod = np.zeros(5)
    worse = judge(
        Check(set="old", metric="recall@10", margin=0.0, rule="no_regression"), prod - 0.1, prod, CFG
    )
    assert worse["result"] == "fail" and worse["ci_high"] == pytest.approx(-0.1)
    mixed = np.array([0.2, -0.2, 0.2, -0.2, 0.0])  # mean 0: not significantly worse
    ok = judge(Check(set="old", metric="recall@10", margin=0.0, rule="no_regression"), mixed, prod, CFG)
    assert ok["result"] == "pass" and ok["ci_low"] < 0 < ok["ci_high"]


def test_small_sets_are_skipped_and_all_skipped_is_gated():
    r = judge(Check(set="new", metric="ndcg@10", margin=0.02), np.ones(2), np.ones(2), CFG)
    assert r["result"] == "skipped" and "2 paired users" in r["why"]
    assert decide([r]) == {
        "passed": False,
        "why": ["every check was skipped: no held-out set is large enough to decide"],
    }
    ok = {"result": "pass", "why": "a"}
    assert decide([r, ok]) == {"passed": True, "why": ["a"]}
    assert decide([ok, {"result": "fail", "why": "b"}]) == {"passed": False, "why": ["b"]}


def test_the_default_gate_states_its_margins():
    cfg = load(GateConfig, "gate", "default")
    assert [(c.set, c.metric, c.margin, c.rule) for c in cfg.reward] == [
        ("new", "ndcg@10", 0.02, "non_inferior"),
        ("new", "recall@10", 0.02, "non_inferior"),
        ("old", "ndcg@10", 0.0, "no_regression"),
        ("old", "recall@10", 0.0, "no_regression"),
    ]
    with pytest.raises(ConfigError, match=r"configs/gate/default.yaml \(with overrides\): confidence"):
        load(GateConfig, "gate", "default", ["confidence=1.5"])
