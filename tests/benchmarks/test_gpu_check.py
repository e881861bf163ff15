"""``benchmarks/gpu_check.sh`` where no GPU is: one line and exit 1; with ``GPU_CHECK_TINY=1`` the
whole script (rollouts, LoRA PARPO update, the log-prob gap) runs on a tiny fp32 model on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.llm, pytest.mark.integration]
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.sh"


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("peft", reason="the llm extra (peft) is not installed")
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHON": sys.executable, **env})  # fmt: skip


def test_without_a_gpu_it_stops_in_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the no-GPU path does not apply")
    out = _run()
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("gpu_check: no CUDA GPU visible") and out.stderr.count("\n") == 1


def test_the_tiny_cpu_run_goes_end_to_end() -> None:
    out = _run(GPU_CHECK_TINY="1")
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["bench"] == "gpu_check" and r["size"] == "tiny" and r["dtype"] == "float32"
    assert 0 < r["generated_tokens"] <= r["episodes"] * r["new_tokens"]
    assert r["logp_gap_max"] <= 1e-5 and r["lora_max_change"] > 0  # fp32: trainer == engine; LoRA moved
