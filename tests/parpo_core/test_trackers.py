"""``runtime.loggers``: the trackers both trainers take, read back from their own files."""

from __future__ import annotations

import importlib.util

import pytest

from parpo_core.config import RuntimeConfig
from parpo_core.errors import UserError
from parpo_core.trackers import trackers


def test_tensorboard_and_mlflow_get_the_config_and_the_metrics(tmp_path):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rt = RuntimeConfig(loggers=["csv", "tensorboard", "mlflow"], run_name="r1")
    cfg = {"train": {"lr": 0.01, "ks": [5, 10]}, "model": {"dim": 8}}
    loggers = trackers(rt, tmp_path, "parpo-test", cfg)
    assert [type(x).__name__ for x in loggers] == ["TensorBoardLogger", "FlatKeys"]  # csv is the trainer's
    for step, value in ((1, 0.5), (2, 0.25)):
        for x in loggers:
            x.log_metrics({"train/loss": value, "train/loss/click": value / 2}, step=step)
    for x in loggers:
        x.finalize("success")
    events = EventAccumulator(str(tmp_path / "tensorboard")).Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(1, 0.5), (2, 0.25)]
    client = MlflowClient((tmp_path / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("parpo-test").experiment_id])
    assert run.info.run_name == "r1" and run.data.params["train.lr"] == "0.01"
    assert run.data.params["train.ks"] == "[5, 10]"
    # MLflow's names use '.' ('train/loss' and 'train/loss/click' would collide in its store)
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train.loss")] == [
        (1, 0.5),
        (2, 0.25),
    ]


def test_a_tracker_whose_package_is_missing_names_its_extra(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(
        UserError, match=r"runtime.loggers: wandb is not installed; pip install 'parpo\[wandb\]'"
    ):
        trackers(RuntimeConfig(loggers=["wandb"]), tmp_path, "x", {})
    assert trackers(RuntimeConfig(), tmp_path, "x", {}) == []  # the default: the CSV log only


@pytest.mark.skipif(
    importlib.util.find_spec("wandb") is None, reason="wandb is not installed (extra 'wandb')"
)
def test_wandb_runs_offline_and_keeps_the_run_in_the_run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # no account, no network: the run stays on disk
    monkeypatch.setenv("WANDB_SILENT", "true")
    (logger,) = trackers(
        RuntimeConfig(loggers=["wandb"], run_name="r1"), tmp_path, "parpo-test", {"a": {"b": 1}}
    )
    logger.log_metrics({"train/loss": 0.5}, step=1)
    logger.finalize("success")
    logger.experiment.finish()
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    assert list(run_dir.glob("run-*.wandb")) and logger.experiment.config["a.b"] == 1
