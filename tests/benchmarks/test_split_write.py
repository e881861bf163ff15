"""``benchmarks/split_write.py`` on a small synthetic world: every split written from a copy
without ``splits/``, the same parts in every repeat."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from data_pipelines.synth import SynthConfig
from data_pipelines.synth.write import write

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "split_write.py"


def test_split_write_reports_rows_peak_and_one_digest(tmp_path):
    write(SynthConfig(n_users=200, n_items=150, rounds=3), tmp_path / "data", splits=False)
    args = ["--data", str(tmp_path / "data"), "--repeats", "2"]
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args], check=True, capture_output=True, text=True
    ).stdout
    *repeats, summary = (json.loads(line) for line in out.strip().splitlines())
    assert len(repeats) == 2 and summary["rows"] == repeats[0]["rows"] > 0
    assert "temporal" in repeats[0]["splits"]
    assert len(summary["parts_digest"]) == 1  # both repeats cut the same parts
    assert summary["peak_rss_gb"] > 0 and not (tmp_path / "data" / "splits").exists()
