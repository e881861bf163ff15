"""``parpo eval ope`` as a user runs it."""

import json
import subprocess
import sys

import pytest

PARPO = [sys.executable, "-m", "parpo.cli.main", "eval", "ope"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PARPO, *args], capture_output=True, text=True, timeout=300)


def one_error(res: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def test_a_version_needs_its_registry(tmp_path):
    assert "or a version with --registry" in one_error(run("--logs", str(tmp_path), "--policy", "v1"))
    err = one_error(run("--logs", str(tmp_path), "--policy", "v1", "--registry", str(tmp_path)))
    assert "no policy versions yet" in err


def test_bts_needs_its_prior(tmp_path):
    assert "--prior" in one_error(run("--logs", str(tmp_path), "--policy", "obd-bts"))


def test_not_a_dataset(tmp_path):
    assert "not a PARPO dataset" in one_error(run("--logs", str(tmp_path), "--policy", "uniform"))


@pytest.mark.realdata
@pytest.mark.integration
def test_uniform_from_bts_logs_as_json(obd):
    res = run("--logs", str(obd[0]), "--policy", "uniform", "--n-boot", "50", "--json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert {(r["campaign"], r["estimator"]) for r in rows} == {
        (c, e) for c in ("men", "women") for e in ("ips", "snips", "dm", "dr", "switch_dr", "dr_os")
    }
    assert all(r["logs"] == "obd-bts" and r["overlap"]["share_never_taken"] == 0.0 for r in rows)
