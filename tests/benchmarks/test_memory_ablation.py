"""The pure helpers of ``benchmarks/memory_ablation.py`` (the study itself is not run in CI):
resume (which runs are left), pairing by (seed, task) against no memory, the memory's state."""

from __future__ import annotations

import json

import pytest

from benchmarks.memory_ablation import memory_state, paired, pending, read_lines, run_key


def _line(world: str, variant: str, seed: int, values: dict[str, list[float]], updates: int = 30) -> dict:
    ids = [f"warm/{k}" for k in range(len(next(iter(values.values()))))]
    part = {"tasks": {"task_id": ids, **values}}
    return {
        "world": world,
        "variant": variant,
        "seed": seed,
        "budget": {"updates": updates, "tasks_per_update": 64},
        "warm": part,
        "cold": {"tasks": {"task_id": [], **{m: [] for m in values}}},
    }


def test_pending_skips_recorded_runs_seed_major(tmp_path):
    path = tmp_path / "r.jsonl"
    assert read_lines(path) == []
    done = [_line("synthetic", "none", 0, {"task_quality": [1.0]}),
            _line("synthetic", "psgm", 0, {"task_quality": [1.0]}, updates=2)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in done) + "\n")
    lines = read_lines(path)
    assert [run_key(r) for r in lines] == [("synthetic", "none", 0, 30, 64), ("synthetic", "psgm", 0, 2, 64)]
    todo = pending(lines, ["synthetic", "price"], ["none", "psgm"], [0, 1], updates=30, tasks=64)
    # psgm seed 0 was recorded at another budget: it is still to run; none seed 0 is done
    assert todo == [
        ("synthetic", "psgm", 0),
        ("price", "none", 0),
        ("price", "psgm", 0),
        ("synthetic", "none", 1),
        ("synthetic", "psgm", 1),
        ("price", "none", 1),
        ("price", "psgm", 1),
    ]
    assert pending(lines, ["synthetic"], ["none"], [0], updates=30, tasks=64) == []


def test_paired_matches_tasks_within_a_seed_only():
    lines = [
        _line("w", "none", 0, {"task_quality": [0.5, 0.7]}),
        _line("w", "none", 1, {"task_quality": [0.1, 0.9]}),
        _line("w", "psgm", 0, {"task_quality": [0.6, 0.7]}),
        _line("w", "psgm", 1, {"task_quality": [0.4, 0.8]}),
        _line("w", "flat", 0, {"task_quality": [0.0, 0.0]}),  # seed 1 missing: seed 0's pairs only
        _line("other", "none", 0, {"task_quality": [9.0, 9.0]}),  # another world never pairs
    ]
    d = paired(lines, "w", "psgm", n_boot=200)
    # pairs (s0, t0) +0.1, (s0, t1) 0, (s1, t0) +0.3, (s1, t1) -0.1: mean +0.075
    assert d["warm"]["n_pairs"] == 4
    assert d["warm"]["task_quality"]["diff"] == pytest.approx(0.075)
    assert d["warm"]["task_quality"]["mean_b"] == pytest.approx(0.55)
    low, high = d["warm"]["task_quality"]["ci_low"], d["warm"]["task_quality"]["ci_high"]
    assert -0.1 <= low <= 0.075 <= high <= 0.3
    assert d["cold"] == {"n_pairs": 0}
    flat = paired(lines, "w", "flat", n_boot=200)
    assert flat["warm"]["n_pairs"] == 2 and flat["warm"]["task_quality"]["diff"] == pytest.approx(-0.6)
    assert paired(lines, "nowhere", "psgm")["warm"] == {"n_pairs": 0}
    against_flat = paired(lines, "w", "psgm", n_boot=200, base="flat")  # seed 0: (0.6 + 0.7) / 2 - 0
    assert against_flat["warm"]["n_pairs"] == 2
    assert against_flat["warm"]["task_quality"]["diff"] == pytest.approx(0.65)


def test_memory_state_is_the_last_update_and_the_mean_hit_rate():
    history = [
        {"loss": 1.0, "memory/skills": 3.0, "memory/hit_rate": 0.0},
        {"loss": 0.5, "memory/skills": 7.0, "memory/hit_rate": 0.5, "memory/communities_fine": 2.0},
    ]
    assert memory_state(history) == {
        "skills": 7.0,
        "hit_rate": 0.5,
        "communities_fine": 2.0,
        "hit_rate_mean": 0.25,
    }
    assert memory_state([{"loss": 1.0}]) == {}
    assert memory_state([]) == {}
