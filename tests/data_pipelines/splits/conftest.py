import pytest

from data_pipelines.dataset import Dataset
from data_pipelines.splits import Prepared

from .helpers import long_tail_rows, make_dataset


@pytest.fixture(scope="module")
def long_tail(tmp_path_factory) -> Dataset:
    """300 users x 4..40 events over 200 Zipf-popular items (read-only: copy before writing splits)."""
    return make_dataset(tmp_path_factory.mktemp("lt") / "ds", long_tail_rows())


@pytest.fixture(scope="module")
def prepared(long_tail) -> Prepared:
    return Prepared.of(long_tail, seed=0)
