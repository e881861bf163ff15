"""``parpo reward train|eval`` as a user runs them, and DDP parity (two CPU ranks vs one process)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.plugins.rewards import FAST

pytestmark = pytest.mark.integration

PARPO = [sys.executable, "-m", "parpo.cli.main"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = os.environ | {"OMP_NUM_THREADS": "1"} | (env or {})
    e.pop("PARPO_REWARD_RUN_DIR", None)
    return subprocess.run([*PARPO, *args], capture_output=True, text=True, timeout=600, env=e)


def only_version(reg: Path) -> Path:
    (v,) = sorted((reg / "reward").glob("v*"))
    return v


def test_train_eval_end_to_end(tiny_synth, tmp_path):
    reg = tmp_path / "REG"
    res = run(
        "reward",
        "train",
        "--data",
        str(tiny_synth),
        "--registry",
        str(reg),
        "--out",
        str(tmp_path / "r1"),
        *FAST,
    )
    assert res.returncode == 0, res.stderr
    assert "published reward/v000001-" in res.stdout
    v = only_version(reg)
    m = json.loads((v / "metrics.json").read_text())
    assert m["split"] == "intervened" and "ndcg@10" in m["test"] and "interest_spearman" in m["synthetic"]
    t = m["training"]  # the evaluations during training, counted and timed apart from it
    assert f"{t['evaluations']} evaluations in " in res.stdout and t["evaluations"] >= 1
    assert (v / "logs" / "metrics.csv").is_file() and (tmp_path / "r1" / "config.yaml").is_file()
    # the MF baseline with another split: a second version, production stays on the first
    res = run(
        "reward", "train", "--data", str(tiny_synth), "--registry", str(reg), "--out", str(tmp_path / "r2"),
        "--config", "mf", "--split", "temporal", *FAST,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "published reward/v000002-" in res.stdout
    prod = json.loads((reg / "reward" / "production.json").read_text())["version"]
    assert prod == v.name
    res = run("reward", "eval", "--registry", str(reg), "--data", str(tiny_synth), "--version", "2")
    assert res.returncode == 0, res.stderr
    evals = list((reg / "reward").glob("v000002-*/evals/*-temporal-*.json"))
    assert len(evals) == 1 and "ndcg@10" in json.loads(evals[0].read_text())["result"]["test"]


def test_bad_config_is_one_error_line(tiny_synth, tmp_path):
    res = run("reward", "train", "--data", str(tiny_synth), "--registry", str(tmp_path / "R"), "model.dimm=3")
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines == [
        "error: configs/reward/dice.yaml (with overrides): unknown key 'model.dimm' (did you mean 'dim'?)"
    ]
    res = run("reward", "eval", "--registry", str(tmp_path / "R"), "--data", str(tiny_synth))
    assert res.returncode == 1 and res.stderr.startswith("error: ") and "Traceback" not in res.stderr


def valid_ndcg(run_dir: Path) -> list[str]:
    with open(run_dir / "logs" / "metrics.csv") as f:
        return [r["valid/ndcg@10"] for r in csv.DictReader(f) if r.get("valid/ndcg@10")]


def test_ddp_two_cpu_ranks_match_one_process(tiny_synth, tmp_path):
    """Two gloo ranks (one thread each) with global batch 256 == one process with batch 256.

    dCor stays on: its subsample comes from the global batch, the same on every rank. Nine
    steps cross an epoch end, and evaluations at steps 4 and 8 (``FAST``) cover the cross-rank reduction of
    the valid metrics (and the impression triples, appended to every global batch).
    """
    common = [
        *FAST,
        "train.max_steps=9",
        "train.early_stopping=false",
        "train.restore_best=false",
    ]
    out = {}
    for ranks in (1, 2):
        reg, rd = tmp_path / f"REG{ranks}", tmp_path / f"run{ranks}"
        res = run("reward", "train", "--data", str(tiny_synth), "--registry", str(reg), "--out", str(rd),
                  *common, f"runtime.devices={ranks}")  # fmt: skip
        assert res.returncode == 0, res.stderr[-3000:]
        assert res.stdout.count("published reward/") == 1  # only rank 0 publishes
        out[ranks] = (load_file(only_version(reg) / "weights" / "model.safetensors"), valid_ndcg(rd))
    (w1, v1), (w2, v2) = out[1], out[2]
    assert set(w1) == set(w2)
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=0, atol=1e-5, msg=k)
    assert len(v1) == len(v2) >= 1
    assert [float(x) for x in v2] == pytest.approx([float(x) for x in v1], abs=1e-6)
