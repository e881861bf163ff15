"""Output for machines: off a terminal nothing is hard-wrapped (paths stay whole), Lightning's
accelerator banner is gone, and ``reward train`` / ``policy train --json`` print one JSON object."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest
from rich.table import Table

from parpo.cli.console import LIGHTNING_LOGGERS, PIPE_WIDTH, hide_lightning_banner, make_console
from parpo_core.artefacts import Registry
from tests.plugins.policies import SERVE_FAST
from tests.plugins.rewards import FAST

PARPO = [sys.executable, "-m", "parpo.cli.main"]
LONG = "/data/" + "/".join(f"segment-{i:02d}-of-a-deep-folder" for i in range(8)) + "/run"  # 257 characters


def test_off_a_terminal_a_long_line_and_a_table_cell_stay_whole(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    c = make_console(file=out)
    assert not c.is_terminal and c.width == PIPE_WIDTH
    c.print(f"trained 3 epochs; run folder {LONG}")
    t = Table()
    t.add_column("path")
    t.add_row(LONG)
    c.print(t)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"trained 3 epochs; run folder {LONG}"
    assert sum(LONG in line for line in lines) == 2  # the printed line and the table's one cell row


def test_columns_set_by_the_user_still_wins(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    c = make_console(file=io.StringIO())
    assert c.width == 60


def test_the_banner_is_dropped_and_other_lightning_lines_kept(caplog):
    log = logging.getLogger(LIGHTNING_LOGGERS[0])
    hide_lightning_banner()
    n = len(log.filters)  # other filters may be there already (reward training adds one)
    hide_lightning_banner()  # idempotent: one filter per logger
    assert len(log.filters) == n
    with caplog.at_level(logging.INFO, logger=LIGHTNING_LOGGERS[0]):
        log.info("GPU available: False, used: False")
        log.info("TPU available: False, using: 0 TPU cores")
        log.warning("GPU available but not used. You can set it by doing `Trainer(accelerator='gpu')`.")
        log.info("`Trainer.fit` stopped: `max_epochs=3` reached.")
    assert [r.getMessage().split(".")[0] for r in caplog.records] == [
        "GPU available but not used",
        "`Trainer",
    ]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    env.pop("COLUMNS", None)
    return subprocess.run([*PARPO, *args], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.integration
def test_train_json_is_one_object_on_stdout_and_paths_stay_whole(tiny_synth, tmp_path):
    reg = tmp_path / "REG"
    res = run(
        "reward", "train", "-d", str(tiny_synth), "-r", str(reg), "-o", str(tmp_path / "rw"), "--json", *FAST,
        "--logger", "tensorboard", "--logger", "mlflow", "--run-name", "nightly: v2",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert list((tmp_path / "rw" / "tensorboard").glob("events.out.tfevents.*"))  # --logger tensorboard
    # the MLflow run names what it published and holds its metrics.json and lineage.json
    (run_dir,) = (tmp_path / "rw" / "mlruns").glob("*/*/artifacts")
    assert {p.name for p in run_dir.iterdir()} == {"metrics.json", "lineage.json"}
    assert (run_dir.parent / "tags" / "parpo.version").read_text().startswith("reward/v000001-")
    assert "run_name: 'nightly: v2'" in (tmp_path / "rw" / "config.yaml").read_text()
    out = json.loads(res.stdout)  # the whole of stdout: progress and metric lines went to stderr
    version = Registry(reg).open("reward", out["version"])
    assert out["published"] == f"reward/{version.name}" and out["run_dir"] == str(tmp_path / "rw")
    assert out["metrics"]["test"] == version.metrics["test"]
    assert out["training"]["epochs"] == 3
    assert "GPU available" not in res.stderr

    res = run(
        "policy", "train", "-d", str(tiny_synth), "-r", str(reg), "-o", str(tmp_path / "p1"), "--json",
        *SERVE_FAST, "--logger", "mlflow",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert list((tmp_path / "p1" / "mlruns").glob("*/*/metrics/update"))  # a run with the update column
    assert list((tmp_path / "p1" / "mlruns").glob("*/*/artifacts/metrics.json"))
    out = json.loads(res.stdout)
    assert out["reward_version"] == version.name
    assert out["published"] == Registry(reg).open("policy", out["version"]).label
    assert 0.0 <= out["summary"]["report/hit@10"] <= 1.0

    # Without --json, piped: the run folder, longer than 80 columns, is printed on one line.
    deep = tmp_path / LONG.lstrip("/")
    res = run("policy", "train", "-d", str(tiny_synth), "-r", str(reg), "-o", str(deep), *SERVE_FAST)
    assert res.returncode == 0, res.stderr
    assert len(str(deep)) > 80
    (line,) = [ln for ln in res.stdout.splitlines() if "run folder" in ln]
    assert line.endswith(f"run folder {deep}")


def test_data_synth_and_ingest_json_are_one_object_with_the_dataset_and_its_splits(tmp_path):
    def run(*args: str) -> dict:
        res = subprocess.run([*PARPO, *args, "--json"], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        return json.loads(res.stdout)  # stdout is the JSON object and nothing else

    world = run("data", "synth", "--out", str(tmp_path / "w"), "--users", "40", "--items", "60")
    assert world["out"] == str(tmp_path / "w") and world["summary"]["rows_accepted"] > 0
    assert {"intervened", "temporal"} <= set(world["splits"])
    more = run("data", "synth", "--continue-from", str(tmp_path / "w"), "--out", str(tmp_path / "w2"),
               "--rounds", "1", "--new-users", "3")  # fmt: skip
    assert more["summary"]["synth"]["continuation"]["new_users"] == 3
    csv = tmp_path / "log.csv"
    run("data", "synth", "--csv", str(csv), "--users", "40", "--items", "60")
    args = ("data", "ingest", "-s", "canonical", "-i", str(csv), "--out", str(tmp_path / "d"))
    first, again = run(*args), run(*args)
    assert first["unchanged"] is False and again["unchanged"] is True
    assert first["summary"]["rows_accepted"] == again["summary"]["rows_accepted"] > 0
