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


def _dataset(tmp_path, name: str, rows: list[str]):
    from data_pipelines.adapters import canonical
    from data_pipelines.ingest import ingest

    csv = tmp_path / f"{name}.csv"
    header = "user_id,item_id,ts,event,category,request_id,position,propensity,logging_policy,value\n"
    csv.write_text(header + "\n".join(rows) + "\n")
    ingest(canonical.source(csv), tmp_path / name)
    return str(tmp_path / name)


def test_logs_without_propensities_name_the_policy_asked_for_and_no_category(tmp_path):
    """Issue 15 point 9: the error named the logger's internal name and the campaign 'men',
    neither of which the user asked for."""
    plain = _dataset(
        tmp_path, "plain", ["u1,i1,1700000000,click,shoes,,,,,", "u2,i2,1700000001,view,shoes,,,,,"]
    )
    err = one_error(run("--logs", plain, "--policy", "uniform"))
    assert err == (
        f"error: {plain}: --policy uniform is estimated from Open Bandit Dataset impressions logged by "
        "obd-bts (logging_policy 'obd_bts') with propensities, and these logs have none (logging "
        "policies with propensities here: none); ingest the Open Bandit Dataset with --source obd, "
        "or evaluate a registry version (--registry) on server logs"
    )
    assert "category" not in err and "'men'" not in err
    # The other policy's logs are there, its own (the truth) are not: said so, once.
    bts = _dataset(tmp_path, "bts", [",men:1,1700000000,impression,men,r1,1,0.5,obd_bts,0"])
    err = one_error(run("--logs", bts, "--policy", "uniform"))
    assert err == (
        f"error: {bts}: --policy uniform is compared with its own click rate, and these logs have no "
        "impressions logged by uniform (logging_policy 'uniform_random') on the campaigns obd-bts "
        "logged (men); ingest both policy folders of the Open Bandit Dataset"
    )
