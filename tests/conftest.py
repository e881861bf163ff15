"""Shared fixtures: the real datasets in ../shared/data (skipped with a reason where absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def real_data(name: str) -> Path:
    """Path of a real dataset folder, or skip the test saying why."""
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"real dataset {name!r} not found at {path} (../shared/data is absent on this machine)")
    return path
