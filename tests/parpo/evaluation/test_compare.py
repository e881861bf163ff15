"""``parpo eval compare``: paired differences on a hand example, and two tiny trained policies
compared the way a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from parpo.evaluation.compare import compare_policies, paired_differences
from parpo.evaluation.policy_eval import evaluate_policy
from parpo_core.errors import UserError
from tests.plugins.policies import FAST_OVERRIDES

PARPO = [sys.executable, "-m", "parpo.cli.main"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PARPO, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )


@pytest.fixture(scope="session")
def two_policies(tiny_synth, published_reward, tmp_path_factory) -> tuple[Path, list[str]]:  # noqa: F811
    """(REG, [v1, v2]): two policies trained for two updates (seeds 0 and 1). Built once per
    session even when another test module imports this fixture (its folder is the cache)."""
    root = tmp_path_factory.getbasetemp() / "eval-two-policies"
    reg = root / "REG"
    if not (root / "done").is_file():
        from parpo.presets import load
        from parpo.trainer.config import PolicyTrainConfig
        from parpo.trainer.pipeline import train_and_publish

        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        shutil.copytree(published_reward, reg)
        for seed in (0, 1):
            cfg = load(PolicyTrainConfig, "policy", "default", [*FAST_OVERRIDES, "train.updates=2",
                                                                f"runtime.seed={seed}"])  # fmt: skip
            train_and_publish(cfg, tiny_synth, reg, run_dir=root / f"run{seed}")
        (root / "done").write_text("")
    return reg, sorted(p.name for p in (reg / "policy").glob("v*"))


def frame(part: list[str], task: list[str], hit: list[float], pref: list[float]) -> pl.DataFrame:
    return pl.DataFrame({"part": part, "task_id": task, "hit@10": hit, "preference": pref})


def test_paired_differences_by_hand():
    a = frame(["warm"] * 3, ["t1", "t2", "t3"], [1.0, 0.0, 1.0], [0.5, 0.2, 0.8])
    # b holds t3 first, t4 (not in a: unpaired) and a cold task (not in a either)
    b = frame(["warm", "warm", "warm", "warm", "cold"], ["t3", "t1", "t2", "t4", "t9"],
              [1.0, 0.0, 0.0, 1.0, 1.0], [0.6, 0.5, 0.1, 0.9, 0.3])  # fmt: skip
    out = paired_differences(a, b, n_boot=400, seed=1)
    w = out["warm"]
    assert w["n_pairs"] == 3 and out["cold"] == {"n_pairs": 0}
    # hit: a - b = [1, 0, 0] -> 1/3; preference: [0, 0.1, 0.2] -> 0.1
    assert w["hit@10"]["diff"] == pytest.approx(1 / 3) and w["preference"]["diff"] == pytest.approx(0.1)
    assert w["hit@10"]["mean_a"] == pytest.approx(2 / 3) and w["hit@10"]["mean_b"] == pytest.approx(1 / 3)
    # resampled means of [1, 0, 0] lie in [0, 1]; of [0, 0.1, 0.2] in [0, 0.2]
    assert 0 <= w["hit@10"]["ci_low"] <= 1 / 3 <= w["hit@10"]["ci_high"] <= 1
    assert 0 <= w["preference"]["ci_low"] < 0.1 < w["preference"]["ci_high"] <= 0.2 + 1e-12
    # Swapping a and b with the same seed negates every difference and mirrors its interval.
    back = paired_differences(b, a, n_boot=400, seed=1)["warm"]
    for m in ("hit@10", "preference"):
        assert back[m]["diff"] == pytest.approx(-w[m]["diff"])
        assert back[m]["ci_low"] == pytest.approx(-w[m]["ci_high"])
        assert back[m]["ci_high"] == pytest.approx(-w[m]["ci_low"])


@pytest.mark.integration
def test_a_policy_carries_its_reward_versions_split_algorithm(two_policies, tiny_synth):  # noqa: F811
    from parpo_core.artefacts import Registry

    reg, (v1, _) = two_policies
    policy = Registry(reg).open("policy", v1)
    reward = Registry(reg).open("reward", policy.lineage.reward)
    assert policy.lineage.split == reward.lineage.split and policy.lineage.split.algorithm == 2
    _, result = evaluate_policy(reg, tiny_synth, v1)
    assert result["split_algorithm"] == 2


@pytest.mark.integration
def test_compare_records_paired_differences_in_each_version(two_policies, tiny_synth):  # noqa: F811
    reg, (v1, v2) = two_policies
    args = ("eval", "compare", "-r", str(reg), "--policies", v1[:7], v2[:7], "-d", str(tiny_synth),
            "--n-boot", "200", "--json")  # fmt: skip
    res = run(*args)
    assert res.returncode == 0, res.stderr[-3000:]
    first, second = json.loads(res.stdout)
    assert (first["policy_version"], second["policy_version"]) == (v1, v2)
    # The single-policy case (``policy eval``) is the eval compare ran for v1.
    path, ev1 = evaluate_policy(reg, tiny_synth, v1)
    assert first["policy_eval"] == path.name
    for part in ("warm", "cold"):
        d12, d21 = first["against"][v2][part], second["against"][v1][part]
        assert d12["n_pairs"] == ev1[part]["n_tasks"] > 0
        for m, d in d12.items():
            if m == "n_pairs":
                continue
            assert d["mean_a"] == pytest.approx(ev1[part]["policy"][m])
            assert d["diff"] == pytest.approx(d["mean_a"] - d["mean_b"])
            assert d["ci_low"] <= d["diff"] <= d["ci_high"] and d["n_boot"] == 200
            assert d21[m]["diff"] == pytest.approx(-d["diff"])
    # Recorded in each version's evals/ (beside its single-policy eval); a re-run is a no-op.
    files = {v: sorted(p.name for p in (reg / "policy" / v / "evals").glob("*.json")) for v in (v1, v2)}
    assert all(len(f) == 2 for f in files.values())
    rec = json.loads(
        (reg / "policy" / v1 / "evals" / [f for f in files[v1] if f != first["policy_eval"]][0]).read_text()
    )
    assert rec["result"] == first and rec["eval_config"]["compare_with"] == [v2]
    assert compare_policies(reg, tiny_synth, [v1, v2], n_boot=200)[1] == [first, second]
    assert {
        v: sorted(p.name for p in (reg / "policy" / v / "evals").glob("*.json")) for v in (v1, v2)
    } == files
    # Printed: true preference leads each table (the world's truth is known), hit@10 labelled.
    shown = run(*args[:-1]).stdout
    first_table = shown.split("cold")[0]
    assert (
        first_table.index("true_preference") < first_table.index("hit@10") < first_table.index("task_quality")
    )
    assert "follow the logging policy's exposure" in " ".join(shown.split())


def test_compare_needs_two_versions(tmp_path):
    with pytest.raises(UserError, match="two or more versions"):
        compare_policies(tmp_path, tmp_path, ["v1"])
