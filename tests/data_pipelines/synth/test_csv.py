"""The benchmark CSV: canonical, ingestible with zero rejects, exact row count."""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data_pipelines.adapters import canonical
from data_pipelines.dataset import Dataset
from data_pipelines.ingest import ingest
from data_pipelines.synth import CSV_COLUMNS, SynthConfig, generate, write_csv

CFG = SynthConfig(n_users=60, n_items=200, rounds=3)


def test_csv_of_n_rows_ingests_with_zero_rejects(tmp_path):
    path = tmp_path / "logs.csv"
    assert write_csv(CFG, path, n_rows=7_000) == 7_000
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS)
    assert len(lines) == 7_001
    s = ingest(canonical.source(path), tmp_path / "ds")
    assert s["rows_in"] == s["rows_accepted"] == 7_000
    assert s["rows_rejected"] == 0


def test_csv_round_trips_the_generated_logs(tmp_path):
    path = tmp_path / "logs.csv"
    n = write_csv(CFG, path)
    expected = generate(CFG).interactions
    assert n == expected.height
    ingest(canonical.source(path), tmp_path / "ds")
    got = Dataset(tmp_path / "ds").interactions().collect().select(CSV_COLUMNS)
    key = ["user_id", "ts", "position", "event"]
    assert_frame_equal(got.sort(key), expected.select(CSV_COLUMNS).sort(key))
    assert pl.read_csv(path, n_rows=1)["ts"][0].endswith("Z")


def test_unknown_csv_column_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unknown CSV column 'seq'"):
        write_csv(CFG, tmp_path / "x.csv", columns=["user_id", "seq"])
