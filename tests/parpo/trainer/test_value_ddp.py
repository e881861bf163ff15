"""The native value head and critic loss under the trainer's DDP path: 2 ranks (gloo on CPU) each
update on their half of one batch of step samples (value_ddp_worker.py); the parameters agree
across ranks, and the value head's step equals the single process's on the whole batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.integration

WORKER = Path(__file__).with_name("value_ddp_worker.py")


def _run(devices: int, out: Path) -> None:
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, str(WORKER), str(devices), str(out)], capture_output=True, text=True,
                         timeout=600, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]


def test_two_ranks_update_the_value_head_as_one_process_does(tmp_path) -> None:
    _run(2, tmp_path)
    _run(1, tmp_path)
    r0, r1, one = (torch.load(tmp_path / f"{name}.pt") for name in ("2-0", "2-1", "1-0"))
    assert r0["n"] == one["n"] >= 8  # equal halves of the same samples
    head = [k for k in one["after"] if k.startswith("value_head.")]
    assert head
    for k in r0["after"]:  # DDP: every parameter identical on both ranks after the update
        assert torch.equal(r0["after"][k], r1["after"][k]), k
    for k in head:  # SGD with lr 1: the step is minus the (clipped) gradient
        assert torch.equal(r0["before"][k], one["before"][k]), k
        step_ddp = r0["after"][k] - r0["before"][k]
        step_one = one["after"][k] - one["before"][k]
        assert step_one.abs().max() > 1e-3, k  # the critic did move
        torch.testing.assert_close(step_ddp, step_one, rtol=1e-5, atol=1e-6, msg=k)
    # the critic's gradient norm (before clipping) is the whole batch's on every rank
    assert r0["metrics"]["critic/grad_norm"] == pytest.approx(one["metrics"]["critic/grad_norm"], rel=1e-5)
    assert r1["metrics"]["critic/grad_norm"] == pytest.approx(one["metrics"]["critic/grad_norm"], rel=1e-5)
