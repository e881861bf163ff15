"""Real disk faults (a full tmpfs, a read-only mount) in a private mount namespace: what was
acknowledged is stored exactly once after space returns and clients retry; a read-only events
folder is reported by /readyz and /v1/events answers at once. Needs ``unshare -m`` and
``mount`` (root, as in CI); elsewhere ``test_reliability.py`` covers the same logic with
injected errno faults."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _namespaces() -> str | None:
    """Why a private mount namespace with a tmpfs cannot be made here (None: it can)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "no unshare or mount command"
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, text=True)  # fmt: skip
    return None if probe.returncode == 0 else f"cannot mount in a private namespace: {probe.stderr.strip()}"


NO_NAMESPACE = _namespaces()
needs_mounts = pytest.mark.skipif(NO_NAMESPACE is not None, reason=f"{NO_NAMESPACE} (not root?)")


def _scenario(name: str, reg: Path, root: Path) -> dict:
    cmd = ["unshare", "-m", "--propagation", "private", sys.executable, "-m", "tests.serving.disk_scenarios",
           name, str(reg), str(root)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_mounts
@pytest.mark.integration
def test_a_full_disk_loses_nothing_acknowledged_and_stores_it_once(serve_registry, tmp_path):
    reg, _ = serve_registry
    out = _scenario("full", reg, tmp_path)
    assert out["n503"] >= 20 and out["space_returned_after"] is not None  # the disk did fill up
    assert 503 in out["readyz"]  # and /readyz said so
    assert len(out["acked"]) == 400 and sorted(out["stored"]) == sorted(out["acked"])
    assert set(out["stored"].values()) == {1}  # exactly once: no 503 surfaced later, no duplicate


@needs_mounts
@pytest.mark.integration
def test_a_read_only_events_folder_is_reported_and_never_hangs(serve_registry, tmp_path):
    reg, _ = serve_registry
    out = _scenario("readonly", reg, tmp_path)
    status, error = out["readyz_ro"]
    assert status == 503 and "Read-only file system" in error
    status, error, seconds = out["events_ro"]
    assert status == 503 and "Read-only file system" in error and seconds < 30
    assert out["act_ro"][:2] == [False, False] and out["act_ro"][2] > 0  # served, not logged
    assert out["events_rw"]["stored"] is True and out["stored"] == {"e1": 1}
