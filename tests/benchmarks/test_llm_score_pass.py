"""``benchmarks/llm_score_pass.py`` on a tiny shape: both contenders run in their own process and
score the generated tokens alike (projecting only their positions changes no log-prob)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.llm

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "llm_score_pass.py"


def test_positions_and_all_give_the_same_log_probs():
    pytest.importorskip("transformers", reason="the llm extra (transformers) is not installed")
    args = ["--layers", "2", "--vocab", "500", "--tokens", "96", "--generated", "24", "--repeats", "1"]
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args], check=True, capture_output=True, text=True
    ).stdout
    rec = json.loads(out.strip().splitlines()[-1])
    assert rec["bench"] == "llm_score_pass" and rec["max_logp_gap"] == 0.0
    assert rec["positions_s"] > 0 and rec["all_s"] > 0 and rec["time_ratio"] > 0
