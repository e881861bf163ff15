"""``benchmarks/reward_step_scale.py`` on small tables: each path timed at each size, and the summary."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reward_step_scale.py"


def test_reward_step_scale_reports_each_path_per_size_and_their_growth():
    args = ["--sizes", "2000x500", "4000x1000", "--steps", "1"]
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args], check=True, capture_output=True, text=True
    ).stdout
    small, large, summary = (json.loads(line) for line in out.strip().splitlines())
    assert (small["users"], small["items"], large["users"]) == (2000, 500, 4000)
    for row in (small, large):
        for path in ("whole_tables", "batch_rows", "lazy_rows"):
            assert row[f"{path}_s_per_step"] > 0 and math.isfinite(row[f"{path}_s_per_1m_triples"])
        assert row["lazy_rows_speedup"] > 0
    assert summary["summary"] and set(summary) >= {
        "whole_tables_largest_over_smallest",
        "batch_rows_largest_over_smallest",
        "lazy_rows_largest_over_smallest",
    }
