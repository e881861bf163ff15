"""Study v2's pure helpers in ``benchmarks/policy_compare.py`` (the study itself is not run in CI):
its budget, the paired differences by (seed, task) with wins per seed, and the summary table."""

from __future__ import annotations

import json

import pytest

from benchmarks.policy_compare import budget_overrides, paired, summarise_v2


def _run(
    algo: str,
    seed: int,
    true_pref: list[float],
    variant: str | None = None,
    overrides: list[str] | None = None,
) -> dict:
    per_task = {
        "task_id": ["t0", "t1"],
        "true_preference": true_pref,
        "task_quality": [1.0, 1.0],
        "group": ["a", "b"],
    }
    return {
        "study": 2,
        "setting": "hetero",
        "algo": algo,
        "seed": seed,
        "G": 8,
        **(
            {"variant": variant, "overrides": overrides or ["advantage.anchor_terms=scale"]}
            if variant
            else {}
        ),
        "budget": {"updates": 60, "tasks_per_update": 128, "rollouts": 61440},
        "train_seconds": 10.0,
        "per_task": {"warm": per_task, "cold": {k: v[:1] for k, v in per_task.items()}},
    }


# parpo - gdpo on true preference: seed 0 [.5, 0] (mean .25, a win), seed 1 [-.1, -.1] (a loss)
RUNS = [
    _run("parpo", 0, [1.0, 0.5]),
    _run("gdpo", 0, [0.5, 0.5]),
    _run("parpo", 1, [0.0, 0.0]),
    _run("gdpo", 1, [0.1, 0.1]),
]


def test_the_study_2_budget_is_the_presets_own() -> None:
    # the default preset: 60 updates x 128 tasks at G = 8; at G = 2 the same rollouts per update
    assert budget_overrides(2, "parpo", "synthetic-g8") == [
        "train.tasks_per_update=128",
        "train.group_size=8",
    ]
    assert budget_overrides(2, "gdpo", "hetero-pool") == ["train.tasks_per_update=512", "train.group_size=2"]
    assert budget_overrides(1, "parpo", "hetero")[:2] == ["train.updates=16", "train.tasks_per_update=64"]


def test_paired_pools_tasks_and_seeds_and_counts_wins_per_seed() -> None:
    by = {a: {r["seed"]: r for r in RUNS if r["algo"] == a} for a in ("parpo", "gdpo")}
    d = paired(by["parpo"], by["gdpo"], "warm", None)
    assert d["n_seeds"] == 2 and d["n_pairs"] == 4
    tp = d["true_preference"]
    assert tp["diff"] == pytest.approx((0.5 + 0 - 0.1 - 0.1) / 4)
    assert tp["ci_low"] <= tp["diff"] <= tp["ci_high"]
    assert (tp["wins"], tp["losses"]) == (1, 1)
    tq = d["task_quality"]  # identical: no difference, a zero-width interval, neither side wins
    assert (tq["diff"], tq["ci_low"], tq["ci_high"], tq["wins"], tq["losses"]) == (0, 0, 0, 0, 0)
    # users of group a only (task t0): [.5, -.1]
    a = paired(by["parpo"], by["gdpo"], "warm", "a")
    assert a["n_pairs"] == 2 and a["true_preference"]["diff"] == pytest.approx(0.2)
    # a seed one side lacks is left out
    assert paired(by["parpo"], {0: by["gdpo"][0]}, "warm", None)["n_pairs"] == 2


def test_summarise_v2_tables_main_runs_and_an_ablation_against_main_parpo(tmp_path) -> None:
    rows = [*RUNS, _run("parpo_s", 0, [1.0, 1.0], variant="scale-only")]
    rows[-1]["algo"] = "parpo"  # an ablation of parpo: compared with the main parpo and gdpo
    path = tmp_path / "v2.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = summarise_v2(path)
    assert "### hetero (G = 8; 60 updates x 128 tasks, 61440 rollouts)" in text
    assert "parpo − gdpo | 2 | +0.075 [" in text
    assert "warm, users a (1 tasks)" in text
    assert "### hetero [scale-only: advantage.anchor_terms=scale]" in text
    # the ablation's seed 0 minus the main parpo's seed 0: [0, .5] -> +0.250, one win
    assert "parpo [scale-only] − parpo (main) | 1 | +0.250 [" in text
    # an ablation run with the personal signal off is compared with the personal-off arms (the
    # variant whose overrides are the largest proper subset of its own), not with the main runs
    off = ["policy.personal_features=false"]
    rows += [_run(a, 0, [0.5, 0.5], "personal-off", off) for a in ("parpo", "gdpo")]
    rows.append(_run("parpo", 0, [0.75, 0.75], "off-baseline", [*off, "advantage.anchor_terms=baseline"]))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = summarise_v2(path)
    assert "parpo [off-baseline] − gdpo [personal-off] | 1 | +0.250 [" in text
    assert "parpo [off-baseline] − parpo (main)" not in text
    assert "parpo [scale-only] − parpo (main) | 1 | +0.250 [" in text
    # a setting where only parpo has run yet: its row, no difference against itself
    path.write_text(json.dumps(RUNS[0]) + "\n")
    text = summarise_v2(path)
    assert "parpo | 1 | 0.750 ± 0.000" in text and " − " not in text
