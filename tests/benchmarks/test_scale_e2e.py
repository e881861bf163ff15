"""The pure helpers of ``benchmarks/scale_e2e.py`` (the benchmark itself is not run in CI)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.scale_e2e import (
    collect,
    growth,
    path_targets,
    published,
    seconds_per_update,
    summary_lines,
    synth_users,
)


def test_growth_ratio_and_limit():
    small = {"data": 2.0, "reward": 10.0, "eval": 4.0, "ope": 1.0}
    large = {"data": 11.0, "reward": 55.0, "eval": 22.4}
    # 11/2 = 5.5 is at the limit (ok); 22.4/4 = 5.6 is over; ope is missing at the larger size
    assert growth(small, large) == {
        "data": {"ratio": 5.5, "ok": True},
        "reward": {"ratio": 5.5, "ok": True},
        "eval": {"ratio": 5.6, "ok": False},
    }


def test_growth_skips_steps_without_a_positive_small_time():
    assert growth({"policy": None, "data": 0.0}, {"policy": 3.0, "data": 1.0}) == {}


def test_growth_of_a_step_that_failed_at_the_larger_size_is_a_miss():
    assert growth({"eval": 4.0}, {"eval": None}) == {"eval": {"ratio": None, "ok": False}}


def test_path_targets_exempt_policy_and_total():
    # reward over 300 s misses; policy over 300 s is exempt but counts in the total 310+400+100 = 810
    t = path_targets({"reward": 310.0, "policy": 400.0, "eval": 100.0})
    assert t == {"total_s": 810.0, "steps_ok": False, "missed": ["reward"], "path_ok": True}
    t = path_targets({"reward": 300.0, "policy": 800.0, "eval": 100.5})
    assert t == {"total_s": 1200.5, "steps_ok": True, "missed": [], "path_ok": False}
    # a failed step has no time: a miss of both targets, the total counts the others
    t = path_targets({"reward": 100.0, "ope": None})
    assert t == {"total_s": 100.0, "steps_ok": False, "missed": ["ope"], "path_ok": False}


def test_seconds_per_update_median_after_the_first(tmp_path: Path):
    csv = tmp_path / "metrics.csv"
    # per update: 10 (first, left out), 3, 5, 4 -> median 4
    csv.write_text("update,time/rollout_s,time/update_s\n1,9.0,1.0\n2,2.0,1.0\n3,4.0,1.0\n4,3.0,1.0\n")
    assert seconds_per_update(csv) == (4.0, 4)
    assert seconds_per_update(tmp_path / "absent.csv") == (None, 0)


def test_published_and_synth_users():
    assert published("last updates: ...\npublished policy/v000001-x\n") == "policy/v000001-x"
    assert published("no version here") is None
    assert synth_users("synth50k") == 50_000
    assert synth_users("beauty") is None


def _step(data: str, step: str, seconds: float, rc: int = 0, **kw) -> dict:
    return {"bench": "scale_e2e", "data": data, "step": step, "seconds": seconds, "rc": rc, **kw}


def test_collect_and_summary_lines_from_separate_runs():
    lines = [
        {"bench": "scale_e2e", "what": "start", "loadavg": [1.0, 1.0, 1.0]},
        _step("synth10k", "data", 2.0),
        _step("synth10k", "policy", 100.0, s_per_update=1.5),
        _step("synth50k", "data", 12.0),
        _step("synth50k", "policy", 120.0, s_per_update=1.8),
        {"bench": "scale_e2e", "data": "synth50k", "step": "eval", "skipped": "an earlier step failed"},
        _step("beauty", "ope", 5.0, rc=1),
        _step("beauty", "ope", 90.0),  # a re-run of the failed step replaces it
        _step("beauty", "reward", 301.0),
        {"bench": "other", "data": "beauty", "step": "eval", "seconds": 1.0, "rc": 0},
    ]
    seconds, per_update = collect(lines)
    assert seconds == {
        "synth10k": {"data": 2.0, "policy": 100.0},
        "synth50k": {"data": 12.0, "policy": 120.0, "eval": None},
        "beauty": {"ope": 90.0, "reward": 301.0},
    }
    assert per_update == {"synth10k": 1.5, "synth50k": 1.8}
    s10, s50, beauty, grow = summary_lines(seconds, per_update)
    assert beauty == {"bench": "scale_e2e", "what": "dataset", "data": "beauty", "total_s": 391.0,
                      "steps_ok": False, "missed": ["reward"], "path_ok": True}  # fmt: skip
    assert (s10["total_s"], s50["total_s"]) == (102.0, 132.0)
    assert grow["users_ratio"] == 5.0
    assert grow["steps"] == {"data": {"ratio": 6.0, "ok": False}, "policy": {"ratio": 1.2, "ok": True}}
    assert grow["policy_s_per_update"] == [1.5, 1.8]
    assert grow["policy_s_per_update_ratio"] == 1.2
