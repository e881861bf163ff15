"""``parpo data synth --continue-from`` as a user runs it: the new dataset, and one-line errors."""

from __future__ import annotations

import json

import yaml

from data_pipelines.synth import SynthConfig, write
from tests.cli.test_cli import _one_error_line, run

WORLD = SynthConfig(n_users=40, n_items=60, rounds=2, seed=3)


def test_continue_from_writes_a_dataset_summary_reads(tmp_path):
    write(WORLD, tmp_path / "dir", splits=False)
    res = run(
        "data", "synth", "--continue-from", str(tmp_path / "dir"), "--out", str(tmp_path / "new"),
        "--rounds", "2", "--new-users", "5", "--new-items", "4", "--interest-drift", "0.25", "--seed", "9",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "continuation 1 of" in res.stdout and "10 users drifted (seed 9)" in res.stdout
    assert "splits:" in res.stdout
    res = run("data", "summary", str(tmp_path / "new"), "--json")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert summary["users"] == 45 and summary["items"] == 64 and summary["rows_rejected"] == 0
    resolved = yaml.safe_load((tmp_path / "new" / "config.yaml").read_text())
    assert SynthConfig.model_validate(resolved["synth"]) == WORLD  # the world's own config


def test_continue_from_errors_are_one_line(tmp_path):
    write(WORLD, tmp_path / "dir", splits=False)
    dir_, new = str(tmp_path / "dir"), str(tmp_path / "new")
    line = _one_error_line(run("data", "synth", "--continue-from", dir_, "--out", new, "--rounds", "0"))
    assert "rounds" in line and "greater than or equal to 1" in line
    line = _one_error_line(run("data", "synth", "--out", new, "--interest-drift", "0.3"))
    assert "--interest-drift needs --continue-from" in line
    line = _one_error_line(
        run("data", "synth", "--continue-from", dir_, "--out", new, "--rounds", "1", "--users", "9")
    )
    assert "--users does not go with --continue-from" in line
    line = _one_error_line(
        run("data", "synth", "--continue-from", dir_ + "/uniform_test", "--out", new, "--rounds", "1")
    )
    assert "not a synthetic dataset" in line
    assert not (tmp_path / "new").exists()
