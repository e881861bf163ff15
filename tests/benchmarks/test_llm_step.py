"""``benchmarks/llm_step.py`` on the tiny model at a small workload: both contenders (ours, TRL's
GRPOTrainer) run one step in their own process and the ratio is reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.llm

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "llm_step.py"


def test_ours_and_trl_each_run_one_step():
    pytest.importorskip("transformers", reason="the llm extra (transformers) is not installed")
    pytest.importorskip("trl", reason="TRL (the dev install's reference for this benchmark) is not installed")
    args = [
        "--prompts",
        "2",
        "--completions",
        "2",
        "--new-tokens",
        "4",
        "--micro-batch",
        "2",
        "--repeats",
        "1",
    ]
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args], check=True, capture_output=True, text=True
    ).stdout
    rec = json.loads(out.strip().splitlines()[-1])
    assert rec["bench"] == "llm_step" and rec["model"] == "tiny"
    assert rec["ours_update_s"] > 0 and rec["trl_update_s"] > 0
    assert rec["ours_step_s"] > 0 and rec["trl_step_s"] > 0 and rec["step_time_ratio_vs_trl"] > 0
