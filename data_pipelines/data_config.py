"""The ``data`` config group (``configs/data/*.yaml``): runtime, splits, generator."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from data_pipelines.splits.rule import PositivesRule
from data_pipelines.synth import SynthConfig
from parpo_core.config import RuntimeConfig, StrictModel


class SplitConfig(StrictModel):
    seed: int = Field(0, description="split realisation; lineage records it")
    algorithm: Literal[1, 2] = Field(
        2, description="1: positive rows; 2: (user, item) pairs with all their rows (docs/splits.md)"
    )
    positives: PositivesRule = PositivesRule()


class DataConfig(StrictModel):
    runtime: RuntimeConfig = RuntimeConfig()
    split: SplitConfig = SplitConfig()
    synth: SynthConfig = SynthConfig()
