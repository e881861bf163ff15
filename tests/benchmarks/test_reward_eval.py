"""``benchmarks/reward_eval.py`` on the tiny synthetic world: timings, peak memory and the same
metrics in every repeat."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reward_eval.py"


def test_reward_eval_reports_time_peak_and_the_metrics(tiny_synth):
    args = ["--data", str(tiny_synth), "--repeats", "2", "--dim", "8"]
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args], check=True, capture_output=True, text=True
    ).stdout
    *repeats, summary = (json.loads(line) for line in out.strip().splitlines())
    assert len(repeats) == 2 and summary["users"] == repeats[0]["users"] == 120
    assert repeats[0]["metrics"] == repeats[1]["metrics"]  # random vectors from a fixed seed
    assert set(summary["metrics"]) >= {
        "test.ndcg@10",
        "synthetic.uniform.ndcg@10",
        "synthetic.interest_spearman",
    }
    assert summary["seconds"] > 0 and summary["peak_rss_gb"] > 0
