"""Config models shared by every layer: the strict frozen base and the ``runtime.*`` keys.

Each part defines its own pydantic models on ``StrictModel``; ``runtime`` means
the same everywhere. A config is a value: it is never mutated after validation
(a changed copy is ``cfg.model_copy(update={...})``), so a config handed to a
trainer is the one recorded beside its outputs. Loading YAML presets and
``key=value`` overrides is ``parpo.presets``' job.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class StrictModel(BaseModel):
    """Unknown keys are errors; validated once, then immutable (copies via ``model_copy``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class RuntimeConfig(StrictModel):
    """Where and how a job runs; the same keys for every command."""

    device: Literal["auto", "cpu", "cuda", "mps"] = Field(
        "auto", description="where to run: auto picks cuda, then mps, then cpu"
    )
    devices: int = Field(1, ge=1, description="number of devices / data-parallel ranks")
    threads: int | None = Field(None, ge=1, description="intra-op CPU threads (None: library default)")
    seed: int = Field(0, description="seeds model init and sampling (python, numpy, torch)")
    loggers: list[Literal["csv", "tensorboard", "mlflow", "wandb"]] = Field(
        ["csv"],
        description="experiment trackers: csv (logs/metrics.csv, always written), tensorboard, mlflow, "
        "wandb (each from its extra: pip install 'parpo[mlflow]')",
    )
    run_name: str | None = Field(
        None, description="the run's name in the trackers (default: the run folder's)"
    )
    tracking_uri: str | None = Field(
        None, description="mlflow tracking URI (default: $MLFLOW_TRACKING_URI, else file:<run folder>/mlruns)"
    )
