"""The ``parpo`` command as a user runs it: fast start, clear errors, real ingests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.plugins.data import real_data

PARPO = [sys.executable, "-m", "parpo.cli.main"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PARPO, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_cli_import_loads_no_heavy_library():
    code = (
        "import sys, parpo.cli.main\n"
        "heavy = [m for m in ('torch', 'pytorch_lightning', 'lightning_fabric', 'transformers', 'polars') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_help_lists_the_commands():
    res = run("--help")
    assert res.returncode == 0
    for cmd in ("data", "demo"):
        assert cmd in res.stdout
    res = run("data", "ingest", "--help")
    assert "--source" in res.stdout and "--map" in res.stdout


def _one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 1, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


def test_bad_input_is_one_line_and_nonzero(tmp_path):
    junk = tmp_path / "junk.csv"
    junk.write_bytes(b"\x00\x01\x02 not a log\n" * 5)
    line = _one_error_line(
        run("data", "ingest", "--source", "taobao", "--input", str(junk), "--out", str(tmp_path / "o"))
    )
    assert "does not look like 'taobao' input" in line
    line = _one_error_line(
        run("data", "ingest", "--source", "nope", "--input", str(junk), "--out", str(tmp_path / "o"))
    )
    assert "unknown source 'nope'" in line
    line = _one_error_line(
        run(
            "data",
            "ingest",
            "--source",
            "taobao",
            "--input",
            str(tmp_path / "missing.csv"),
            "--out",
            str(tmp_path / "o"),
        )
    )
    assert "no such file" in line
    line = _one_error_line(run("data", "summary", str(tmp_path)))
    assert "not a PARPO dataset" in line


def test_config_errors_name_the_key(tmp_path):
    csv = tmp_path / "a.csv"
    csv.write_text("user_id,item_id,event\nu1,i1,click\n")
    base = ["data", "ingest", "--source", "canonical", "--input", str(csv), "--out", str(tmp_path / "o")]
    line = _one_error_line(run(*base, "split.sed=3"))
    assert "unknown key 'split.sed' (did you mean 'seed'?)" in line
    line = _one_error_line(run(*base, "runtime.devices=zero"))
    assert "runtime.devices" in line
    line = _one_error_line(run(*base, "split.algorithm=3"))
    assert "split.algorithm" in line and "1 or 2" in line
    bad = tmp_path / "bad.yaml"
    bad.write_text("runtime:\n  thread: 2\n")
    line = _one_error_line(run(*base, "--config", str(bad)))
    assert f"{bad}: unknown key 'runtime.thread' (did you mean 'threads'?)" in line
    line = _one_error_line(run(*base, "--config", "defualt"))
    assert "unknown data preset 'defualt' (did you mean 'default'?)" in line


def test_ingest_writes_summary_rejects_and_resolved_config(tmp_path):
    csv = tmp_path / "a.csv"
    csv.write_text(
        "user_id,item_id,ts,event\nu1,i1,1700000000,click\nu1,i2,oops,view\nu2,i1,1700000001,buy\n"
    )
    out = tmp_path / "ds"
    res = run(
        "data", "ingest", "-s", "canonical", "-i", str(csv), "-o", str(out), "--no-splits", "runtime.seed=7"
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["rows_in"], summary["rows_accepted"], summary["rows_rejected"]) == (3, 2, 1)
    assert "runtime:\n  device: auto" in (out / "config.yaml").read_text()
    assert "seed: 7" in (out / "config.yaml").read_text()
    res = run("data", "ingest", "-s", "canonical", "-i", str(csv), "-o", str(out), "--no-splits")
    assert res.returncode == 0 and "already ingested" in res.stdout
    res = run("data", "summary", str(out), "--json")
    assert json.loads(res.stdout)["rows_rejected"] == 1


def test_data_split_cuts_the_algorithm_asked_for(tmp_path):
    csv = tmp_path / "a.csv"
    rows = [
        f"u{u},i{i},{1700000000 + 10 * i},{e}" for u in range(3) for i in range(4) for e in ("click", "buy")
    ]
    csv.write_text("user_id,item_id,ts,event\n" + "\n".join(rows) + "\n")
    out = tmp_path / "ds"
    assert (
        run("data", "ingest", "-s", "canonical", "-i", str(csv), "-o", str(out), "--no-splits").returncode
        == 0
    )
    # 3 warm users (none cold under seed 0), 4 items each, each clicked then bought: rows put
    # the last buy (i3) in test and its click in valid; pairs put i3's two rows in test, i2's in valid.
    for algorithm, suffix, valid_item in ((1, "", "i3"), (2, "-a2", "i2")):
        res = run("data", "split", str(out), "--name", "temporal", f"split.algorithm={algorithm}")
        assert res.returncode == 0, res.stderr
        (path,) = (out / "splits" / "temporal").glob(f"0-*{suffix}")
        assert json.loads((path / "meta.json").read_text())["algorithm"] == algorithm
        test, valid = (pl.read_parquet(path / f"{k}.parquet") for k in ("test", "valid"))
        assert test.get_column("item_id").unique().to_list() == ["i3"] and test.height == 3 * algorithm
        assert (
            valid.get_column("item_id").unique().to_list() == [valid_item] and valid.height == 3 * algorithm
        )


@pytest.mark.realdata
@pytest.mark.integration
def test_ingest_movielens_through_the_cli_writes_splits(tmp_path):
    out = tmp_path / "ml"
    res = run(
        "data",
        "ingest",
        "--source",
        "movielens",
        "--input",
        str(real_data("movielens-100k")),
        "--out",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    names = {p.name for p in (out / "splits").iterdir()}
    assert {"temporal", "intervened", "cold_users", "cold_items"} <= names
    meta = json.loads(next((out / "splits" / "temporal").glob("0-*/meta.json")).read_text())
    assert meta["data_fingerprint"] == json.loads((out / "summary.json").read_text())["fingerprint"]


@pytest.mark.integration
def test_demo_runs_end_to_end_into_a_fresh_folder(tmp_path):
    res = run(
        "demo",
        "--loop",
        "synth.n_users=200",
        "synth.n_items=300",
        "policy.train.updates=2",
        "policy.train.tasks_per_update=16",
        "policy.train.group_size=4",
        "policy.train.progress_bar=false",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and str(runs[0].name) in res.stdout.replace("\n", "")
    data = runs[0] / "data"
    summary = json.loads((data / "summary.json").read_text())
    assert summary["rows_in"] == summary["rows_accepted"] > 0 and summary["users"] == 200
    assert {p.name for p in (data / "splits").iterdir()} == {
        "temporal",
        "intervened",
        "cold_users",
        "cold_items",
    }
    assert (
        (runs[0] / "config.yaml").exists() and (data / "truth").is_dir() and (data / "uniform_test").is_dir()
    )
    # The demo trains, publishes and evaluates a policy against its reward model.
    policy, *retrained = sorted((runs[0] / "registry" / "policy").glob("v*"))  # v1: the demo's
    (ev,) = [p for p in (policy / "evals").glob("*.json") if "-ope-" not in p.name]
    assert json.loads(ev.read_text())["result"]["warm"]["n_tasks"] > 0
    assert "greedy_reward" in res.stdout and "8/11" in res.stdout and "answered:" in res.stdout
    assert list((runs[0] / "events" / "decisions").glob("*"))
    # The served logs come back through ingest, and the off-policy estimate reaches the report.
    (ope,) = [json.loads(p.read_text()) for p in (policy / "evals").glob("*-ope-*.json")]
    assert ope["result"]["ope"]["n_requests"] > 100 and ope["result"]["ope"]["temperature"] == 0.0
    html = (runs[0] / "report" / "report.html").read_text()
    assert len(html) > 10_000 and "no logged feedback" not in html
    # --loop: the world drifts, the served events join its logs, a retrain runs while a server
    # follows production, and the new production is evaluated next to the one before it.
    drifted = json.loads((runs[0] / "data-drifted" / "summary.json").read_text())
    assert drifted["users"] == 300 and drifted["items"] > 300  # +100 users, +200 items (some unseen)
    assert [i["source"] for i in drifted["ingests"]][-1] == "parpo-events"
    (key,) = (runs[0] / "registry" / "retrain").glob("*/outcome.json")
    outcome = json.loads(key.read_text())
    production = json.loads((runs[0] / "registry" / "policy" / "production.json").read_text())["version"]
    assert outcome["status"] in ("promoted", "gated") and len(retrained) == 1
    assert (production != policy.name) == (outcome["status"] == "promoted")
    assert "(0 failed)" in res.stdout and f"policy {production} / reward" in res.stdout
    assert "11/11" in res.stdout and "\n  before " in res.stdout
    again = run("demo", "--out", str(runs[0]), cwd=tmp_path)
    assert "already exists and is not empty" in _one_error_line(again)


@pytest.mark.integration
def test_synth_csv_round_trips_through_canonical_ingest(tmp_path):
    csv = tmp_path / "logs.csv"
    res = run("data", "synth", "--csv", str(csv), "--users", "100", "--items", "150")
    assert res.returncode == 0, res.stderr
    res = run("data", "ingest", "-s", "canonical", "-i", str(csv), "-o", str(tmp_path / "ds"), "--no-splits")
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "ds" / "summary.json").read_text())
    assert summary["rows_rejected"] == 0 and summary["users"] == 100
