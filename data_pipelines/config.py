"""Config models shared by every layer: the strict base and the ``runtime.*`` keys.

Each part defines its own pydantic models on ``StrictModel``; ``runtime`` means
the same everywhere. Loading YAML presets and ``key=value`` overrides is the
CLI's job (``parpo.presets``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class StrictModel(BaseModel):
    """Unknown keys are errors, values are validated on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RuntimeConfig(StrictModel):
    """Where and how a job runs; the same keys for every command."""

    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    devices: int = Field(1, ge=1, description="number of devices / data-parallel ranks")
    threads: int | None = Field(None, ge=1, description="intra-op CPU threads (None: library default)")
    seed: int = 0
