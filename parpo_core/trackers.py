"""Experiment trackers for both trainers (``runtime.loggers``): Lightning's TensorBoard, MLflow and
Weights & Biases loggers. They subclass Fabric's ``Logger``, so the reward trainer (Lightning) and
the policy trainer (Fabric) take the same objects. The CSV log (``logs/metrics.csv``) is each
trainer's own and always written: the report and the registry read it.

Each tracker's package comes from its extra (``pip install 'parpo[tensorboard]'``, ``[mlflow]``,
``[wandb]``); a missing one is one line naming the extra. Lightning is imported inside the
function, so importing this module stays light.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from parpo_core.config import RuntimeConfig
from parpo_core.errors import UserError

#: The package each tracker imports, which its extra installs.
PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow", "wandb": "wandb"}


def trackers(rt: RuntimeConfig, run_dir: Path, experiment: str, config: dict[str, Any]) -> list[Any]:
    """The loggers ``rt.loggers`` asks for besides the CSV log, with the resolved ``config`` logged
    as hyperparameters. ``experiment``: the MLflow experiment / W&B project (e.g. ``parpo-reward``)."""
    wanted = [name for name in dict.fromkeys(rt.loggers) if name != "csv"]
    for name in wanted:
        if importlib.util.find_spec(PACKAGES[name]) is None:
            raise UserError(f"runtime.loggers: {name} is not installed; pip install 'parpo[{name}]'")
    name = rt.run_name or run_dir.name
    out: list[Any] = []
    for kind in wanted:
        if kind == "tensorboard":
            from pytorch_lightning.loggers import TensorBoardLogger

            out.append(TensorBoardLogger(save_dir=str(run_dir), name="tensorboard", version=""))
        elif kind == "mlflow":
            from pytorch_lightning.loggers import MLFlowLogger

            uri = rt.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
            if uri is None:  # offline default: MLflow's file store in the run folder, which MLflow 3
                uri = (run_dir / "mlruns").resolve().as_uri()  # opens only with this opt-in
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")

            class FlatKeys(MLFlowLogger):  # type: ignore[misc,valid-type]
                """MLflow stores a metric per path: ``train/loss`` and ``train/loss/click`` collide,
                so metric names use ``.`` where the CSV log uses ``/``."""

                def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
                    super().log_metrics({k.replace("/", "."): v for k, v in metrics.items()}, step)

            out.append(FlatKeys(experiment_name=experiment, run_name=name, tracking_uri=uri))
        else:
            from pytorch_lightning.loggers import WandbLogger

            out.append(WandbLogger(project=experiment, name=name, save_dir=str(run_dir)))
    for logger in out:
        logger.log_hyperparams(flatten(config))
    return out


def log_published(trackers: list[Any], version_dir: Path, label: str) -> None:
    """After publish: each MLflow run gets the version's ``metrics.json`` and ``lineage.json`` as
    artifacts and a ``parpo.version`` tag, so a tracked run names what it published. (TensorBoard
    keeps scalars only; W&B runs are not given files here.)"""
    if not trackers:  # the default: no tracker, and no Lightning import for nothing
        return
    from pytorch_lightning.loggers import MLFlowLogger

    for t in trackers:
        if isinstance(t, MLFlowLogger):
            t.experiment.set_tag(t.run_id, "parpo.version", label)
            for name in ("metrics.json", "lineage.json"):
                if (version_dir / name).is_file():
                    t.experiment.log_artifact(t.run_id, str(version_dir / name))


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 0.01}}`` -> ``{"train.lr": 0.01}`` (trackers and MLflow show flat keys);
    scalars and None as they are, anything else (lists) as text."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= flatten(v, f"{key}.")
        else:
            out[key] = v if isinstance(v, int | float | str | bool) or v is None else str(v)
    return out
