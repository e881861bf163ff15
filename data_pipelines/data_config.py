"""The ``data`` config group (``configs/data/*.yaml``): runtime, splits, generator."""

from __future__ import annotations

from pydantic import Field

from data_pipelines.splits.rule import PositivesRule
from data_pipelines.synth import SynthConfig
from parpo_core.config import RuntimeConfig, StrictModel


class SplitConfig(StrictModel):
    seed: int = Field(0, description="split realisation; lineage records it")
    positives: PositivesRule = PositivesRule()


class DataConfig(StrictModel):
    runtime: RuntimeConfig = RuntimeConfig()
    split: SplitConfig = SplitConfig()
    synth: SynthConfig = SynthConfig()
