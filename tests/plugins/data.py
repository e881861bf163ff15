"""The real datasets in ../shared/data (skipped with a reason where absent) and the tiny
synthetic world (truth + uniform_test) most model tests train on."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_pipelines.adapters import open_source
from data_pipelines.ingest import ingest
from data_pipelines.synth import SynthConfig, write

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TINY = SynthConfig(n_users=120, n_items=160, seed=3, rounds=8)


def real_data(name: str) -> Path:
    """Path of a real dataset folder, or skip the test saying why."""
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"real dataset {name!r} not found at {path} (../shared/data is absent on this machine)")
    return path


@pytest.fixture(scope="session")
def tiny_synth(tmp_path_factory) -> Path:
    """DIR of a 120-user x 160-item synthetic dataset with its splits (seed 0)."""
    out = tmp_path_factory.mktemp("reward-synth") / "data"
    write(TINY, out)
    return out


@pytest.fixture(scope="session")
def obd(tmp_path_factory) -> tuple[Path, Path]:
    """(the small Open Bandit Dataset ingested once, its prior_bts.yaml)."""
    src = real_data("open-bandit-dataset-small")
    out = tmp_path_factory.mktemp("obd") / "ds"
    ingest(open_source("obd", src), out)
    return out, src / "prior_bts.yaml"
