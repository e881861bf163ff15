from pathlib import Path

import pytest

from data_pipelines.adapters import open_source
from data_pipelines.ingest import ingest
from tests.plugins.data import real_data


@pytest.fixture(scope="session")
def obd(tmp_path_factory) -> tuple[Path, Path]:
    """(the small Open Bandit Dataset ingested once, its prior_bts.yaml)."""
    src = real_data("open-bandit-dataset-small")
    out = tmp_path_factory.mktemp("obd") / "ds"
    ingest(open_source("obd", src), out)
    return out, src / "prior_bts.yaml"
