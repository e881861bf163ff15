"""``parpo policy train|eval|predict`` as a user runs them, and two DDP ranks on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.plugins.policies import FAST_OVERRIDES

pytestmark = pytest.mark.integration

PARPO = [sys.executable, "-m", "parpo.cli.main"]
FAST = [*FAST_OVERRIDES, "train.updates=2"]
METRICS = {"hit@10", "ndcg@10", "task_quality", "preference", "true_preference"}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    env.pop("PARPO_POLICY_RUN_DIR", None)
    return subprocess.run([*PARPO, *args], capture_output=True, text=True, timeout=900, env=env)


@pytest.fixture(scope="module")
def trained(tiny_synth, published_reward, tmp_path_factory) -> tuple[Path, Path]:  # noqa: F811
    """A copy of the reward registry with one policy trained by the CLI (GDPO, G = 2)."""
    import shutil

    root = tmp_path_factory.mktemp("policy-cli")
    reg = root / "REG"
    shutil.copytree(published_reward, reg)
    res = run("policy", "train", "-d", str(tiny_synth), "-r", str(reg), "-o", str(root / "run"),
              "--algo", "gdpo", "--group-size", "2", *FAST)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "published policy/v000001" in res.stdout
    return reg, root


def test_published_policy_carries_what_serving_needs(trained):
    reg, root = trained
    (v,) = sorted((reg / "policy").glob("v*"))
    for rel in ("policy/policy.safetensors", "policy/policy.json", "catalogue.parquet", "anchors.parquet",
                "logs/metrics.csv", "config.yaml", "manifest.json", "metrics.json"):  # fmt: skip
        assert (v / rel).is_file(), rel
    lineage = json.loads((v / "lineage.json").read_text())
    (rv,) = sorted((reg / "reward").glob("v*"))
    assert lineage["reward"] == rv.name and lineage["extra"]["algo"] == "gdpo"
    assert lineage["extra"]["group_size"] == 2
    log = pl.read_csv(v / "logs" / "metrics.csv")
    assert log["update"].to_list() == [1, 2] and "reward/preference/mean" in log.columns
    assert (root / "run" / "config.yaml").is_file()
    listed = run("registry", "list", "--registry", str(reg), "--kind", "policy")
    assert listed.returncode == 0 and "v000001" in listed.stdout


def test_eval_records_every_metric_for_every_agent(trained, tiny_synth):  # noqa: F811
    reg, _ = trained
    res = run("policy", "eval", "-r", str(reg), "-d", str(tiny_synth), "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["schema_version"] == 1 and out["split"] == "intervened"
    assert out["policy_version"].startswith("v000001") and out["reward_version"].startswith("v000001")
    for part in ("warm", "cold"):
        sec = out[part]
        assert sec["n_tasks"] > 0
        agents = {"policy": sec["policy"], **sec["baselines"]}
        # Synthetic data knows the truth: the oracle on true interest is recorded too.
        assert set(agents) == {"policy", "random", "popularity", "fixed_plan", "greedy_reward", "oracle_true"}
        assert agents["oracle_true"]["true_preference"] >= agents["popularity"]["true_preference"]
        for name, m in agents.items():
            assert set(m) == METRICS, name
            assert all(isinstance(x, float) for x in m.values()), name
            assert 0 <= m["task_quality"] <= 1 and 0 <= m["hit@10"] <= 1
    (v,) = sorted((reg / "policy").glob("v*"))
    (js,) = sorted((v / "evals").glob("*.json"))
    per_task = pl.read_parquet(js.with_suffix(".tasks.parquet"))
    assert per_task.height == 6 * (out["warm"]["n_tasks"] + out["cold"]["n_tasks"])
    # Tiny sets are smaller than the default sample: every task is evaluated, with intervals.
    assert out["sample"]["warm"] == 2000 and out["warm"]["tasks_available"] == out["warm"]["n_tasks"]
    assert set(out["warm"]["ci95"]) == {"policy", *out["warm"]["baselines"]}
    lo, hi = out["warm"]["ci95"]["policy"]["hit@10"]
    assert lo <= out["warm"]["policy"]["hit@10"] <= hi
    # An identical re-run is a no-op (add-only evals).
    again = run("policy", "eval", "-r", str(reg), "-d", str(tiny_synth), "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == out
    shown = run("policy", "eval", "-r", str(reg), "-d", str(tiny_synth))
    assert shown.returncode == 0 and "share of the oracle's margin over popularity" in shown.stdout
    assert shown.stdout.index("true_preference") < shown.stdout.index("hit@10")
    assert len(list((v / "evals").glob("*.json"))) == 1
    few = run("policy", "eval", "-r", str(reg), "-d", str(tiny_synth), "--tasks", "3", "--json")
    assert few.returncode == 0, few.stderr[-3000:]
    assert [json.loads(few.stdout)[p]["n_tasks"] for p in ("warm", "cold")] == [3, 3]
    assert len(list((v / "evals").glob("*.json"))) == 2  # a sampled eval is recorded beside the full one


def test_predict_answers_every_request_in_order(trained, tmp_path):
    reg, _ = trained
    items = pl.read_parquet(next((reg / "policy").glob("v*")) / "catalogue.parquet")
    cat = items["category"].drop_nulls()[0]
    cands = items.filter(pl.col("category") == cat)["item_id"].to_list()[:4]
    req = pl.DataFrame(
        {
            "request_id": ["r1", "r2", "r3"],
            "user_id": ["u0001", "somebody-new", "u0002"],
            "category": [cat, None, cat],
            "price_max": [None, 100.0, None],
            "k": [5, 10, 3],
            "candidates": [None, None, cands],
        }
    )
    req.write_parquet(tmp_path / "req.parquet")
    res = run(
        "policy",
        "predict",
        "-r",
        str(reg),
        "--requests",
        str(tmp_path / "req.parquet"),
        "-o",
        str(tmp_path / "out.parquet"),
        "--json",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout) == {"out": str(tmp_path / "out.parquet"), "slates": 3}
    out = pl.read_parquet(tmp_path / "out.parquet")
    assert out["request_id"].to_list() == ["r1", "r2", "r3"]
    assert out["cold"].to_list()[1] is True
    sizes = [len(s) for s in out["items"].to_list()]
    assert sizes[0] <= 5 and sizes[1] <= 10 and sizes[2] <= 3 and min(sizes) >= 1
    assert set(out["items"][2].to_list()) <= set(cands)


def test_predict_rejects_a_bad_row_with_one_line_and_writes_nothing(trained, tmp_path):
    reg, _ = trained
    pl.DataFrame(
        {
            "request_id": ["r1", "r2"],
            "user_id": ["u1", "u2"],
            "price_min": [1.0, 9.0],
            "price_max": [5.0, 3.0],
        }
    ).write_parquet(tmp_path / "bad.parquet")
    res = run(
        "policy",
        "predict",
        "-r",
        str(reg),
        "--requests",
        str(tmp_path / "bad.parquet"),
        "-o",
        str(tmp_path / "out.parquet"),
    )
    assert res.returncode == 1
    assert res.stderr.strip().count("\n") == 0 and "row 2" in res.stderr and "price_min" in res.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_two_ddp_ranks_keep_identical_anchors(tiny_synth, published_reward, tmp_path):  # noqa: F811
    import shutil

    reg = tmp_path / "REG"
    shutil.copytree(published_reward, reg)
    res = run(
        "policy",
        "train",
        "-d",
        str(tiny_synth),
        "-r",
        str(reg),
        "-o",
        str(tmp_path / "run"),
        *FAST,
        "runtime.devices=2",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("published policy/") == 1  # only rank 0 publishes
    log = pl.read_csv(tmp_path / "run" / "logs" / "metrics.csv")
    assert log["update"].to_list() == [1, 2]
    assert log["anchors/rank_divergence"].to_list() == [0.0, 0.0]
    assert log["anchors/users"].to_list()[-1] > 0
