"""No (user, item) pair crosses train/valid/test in any split of the real datasets in
../shared/data (split algorithm 2). Coat's ``native`` test is its own uniformly random
log, kept as the source defines it: only its train/valid are checked (docs/splits.md
gives how many pairs its test shares)."""

from __future__ import annotations

import pytest

from data_pipelines.adapters import open_source
from data_pipelines.dataset import Dataset
from data_pipelines.ingest import ingest
from data_pipelines.splits import Prepared, applicable_splits, compute_split, pair_overlap
from data_pipelines.splits.overlap import HELD_OUT
from tests.plugins.data import real_data

pytestmark = [pytest.mark.realdata, pytest.mark.integration]

SOURCES = {
    "taobao": "taobao-userbehavior-sample",
    "amazon-s3rec": "amazon-beauty-5core-s3rec",
    "movielens": "movielens-100k",
    "coat": "coat",
    "obd": "open-bandit-dataset-small",
}


@pytest.mark.parametrize("source", SOURCES)
def test_no_pair_crosses_parts(source, tmp_path):
    folder = real_data(SOURCES[source])
    ingest(open_source(source, folder), tmp_path / source)
    ds = Dataset(tmp_path / source)
    p = Prepared.of(ds)
    for name in applicable_splits(ds):
        s = compute_split(ds, name, prepared=p)
        checks = [("valid", "train")] if (source, name) == ("coat", "native") else HELD_OUT
        overlap = pair_overlap(s.parts(), checks)
        assert overlap and not any(overlap.values()), (name, overlap)
        assert s.test.height > 0, name
