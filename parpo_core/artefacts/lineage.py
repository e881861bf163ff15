"""Where a version came from: parent, data, split, seeds, code.

Stored as ``lineage.json`` in every version (inside the manifest, so it cannot
be edited afterwards without ``verify`` noticing).
"""

from __future__ import annotations

import functools
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from parpo_core.artefacts.layout import utc_now

REPO_ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def package_version() -> str:
    """The installed ``parpo`` distribution's version (``unknown`` when not installed)."""
    try:
        return metadata.version("parpo")
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def git_sha(repo: Path = REPO_ROOT) -> str | None:
    """``git rev-parse HEAD`` of the checkout the code runs from; None when there is none.

    Never raises: an installed wheel, a missing git binary or a slow disk all give None.
    """
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and len(sha) in (40, 64) else None


class SplitRef(BaseModel):
    """The split a model was trained on: enough to cut it again on other data."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    seed: int = 0
    algorithm: int = Field(
        1,
        ge=1,
        description="Split algorithm: 1 = positive rows, 2 = (user, item) pairs. Lineages written "
        "before it was recorded hold none: their split is algorithm 1.",
    )
    positives: dict[str, Any] = Field(
        default_factory=dict, description="The positives rule as a dict (PositivesRule.model_dump())."
    )

    @field_validator("positives", mode="before")
    @classmethod
    def _rule_as_dict(cls, v: Any) -> Any:
        # Accept a PositivesRule (or any pydantic model) without importing data_pipelines.splits (polars).
        return v.model_dump(mode="json") if isinstance(v, BaseModel) else v


class Lineage(BaseModel):
    """Parent version, data fingerprint, split, seed, package version and git sha of a version."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    parent: str | None = Field(None, description="The version this one was trained from, same kind.")
    reward: str | None = Field(
        None, description="A policy's reward version: its user vectors and the preference it was trained on."
    )
    data_fingerprint: str
    split: SplitRef
    seed: int = Field(0, description="Training seed (model init, sampling).")
    package_version: str = Field(default_factory=package_version)
    git_sha: str | None = Field(default_factory=git_sha)
    created: str = Field(default_factory=utc_now, description="When training produced it (UTC).")
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="Anything else worth keeping, e.g. a policy's algorithm and group size.",
    )
