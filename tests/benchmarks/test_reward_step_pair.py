"""``benchmarks/reward_step_pair.py`` on the tiny synthetic dataset: both datasets' steps timed, and the ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "reward_step_pair.py"


@pytest.mark.integration
def test_reward_step_pair_times_interleaved_steps_of_both_datasets(tiny_synth):
    args = [str(tiny_synth), str(tiny_synth), "train.batch_size=64", "--steps", "3", "--warmup", "1"]
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args], check=True, capture_output=True, text=True
    ).stdout
    a, b, summary = (json.loads(line) for line in out.strip().splitlines())
    for row in (a, b):
        assert row["steps"] == 3 and row["train_positives"] > 0
        assert row["triples_per_step"] >= 64  # the batch's positives, then their impressions
        assert row["s_per_step"] > row["fetch_s_per_step"] > 0
    assert summary == {
        "bench": "reward_step_pair",
        "summary": True,
        "large_over_small": round(b["s_per_1m_triples"] / a["s_per_1m_triples"], 2),
    }
