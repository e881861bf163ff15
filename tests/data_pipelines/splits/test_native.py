"""The native split of Coat (uniform-random test) and OBD (logs kept apart)."""

import polars as pl
import pytest

from data_pipelines.splits import PositivesRule, applicable_for, compute_split
from parpo_core.errors import DataError

from .helpers import coat_rows, keys, make_dataset, obd_rows


@pytest.fixture(scope="module")
def coat(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("coat") / "ds", coat_rows(), source="coat")


@pytest.fixture(scope="module")
def obd(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("obd") / "ds", obd_rows(), source="obd")


def test_applicability_by_source():
    assert applicable_for("coat") == ["native", "intervened", "cold_users", "cold_items"]
    assert applicable_for("obd") == ["native"]
    assert applicable_for("movielens") == ["temporal", "intervened", "cold_users", "cold_items"]


def test_coat_native_tests_on_the_random_ratings(coat):
    s = compute_split(coat, "native")
    rows = coat.interactions().collect()
    random = rows.filter(pl.col("logging_policy") == "uniform_random")
    assert keys(s.test) == keys(random)
    assert keys(s.train) | keys(s.valid) == keys(rows) - keys(random)
    assert not keys(s.train) & keys(s.valid)
    # No cold users in Coat's native split.
    assert set(s.meta["counts"]) == {"train", "valid", "test"} and s.cold_profile.is_empty()
    # ~10% of 480 self-selected rows: Binomial mean 48, sd 6.6.
    assert 20 <= s.valid.height <= 80


def test_coat_native_with_a_rating_threshold(coat):
    s = compute_split(coat, "native", rule=PositivesRule(min_value=4))
    for part in (s.train, s.valid, s.test):
        assert (part.get_column("value") >= 4).all()
    assert (
        s.test.height
        == coat.interactions()
        .filter((pl.col("logging_policy") == "uniform_random") & (pl.col("value") >= 4))
        .collect()
        .height
    )


@pytest.mark.parametrize("name", ["intervened", "cold_users", "cold_items"])
def test_coat_history_splits_leave_the_random_ratings_alone(coat, name):
    s = compute_split(coat, name)
    random = keys(coat.interactions().filter(pl.col("logging_policy") == "uniform_random").collect())
    for k, part in s.parts().items():
        assert not keys(part) & random, k
    assert s.cold_profile.height > 0


def test_coat_has_no_temporal_split(coat):
    with pytest.raises(DataError, match="does not apply to coat"):
        compute_split(coat, "temporal")


def test_obd_native_keeps_the_logs_apart(obd):
    s = compute_split(obd, "native")
    rows = obd.interactions().collect()
    assert keys(s.test) == keys(rows.filter(pl.col("logging_policy") == "uniform_random"))
    assert (s.test.get_column("event") == "impression").sum() == 600  # exposures kept
    for part in (s.train, s.valid):
        assert part.get_column("logging_policy").unique().to_list() == ["obd_bts"]
    assert keys(s.train) | keys(s.valid) == keys(rows.filter(pl.col("logging_policy") == "obd_bts"))
    # Whole requests go to valid.
    assert not set(s.train.get_column("request_id")) & set(s.valid.get_column("request_id"))
    assert 5 <= s.valid.get_column("request_id").n_unique() <= 40  # ~10% of 200


def test_obd_has_only_native(obd):
    with pytest.raises(DataError, match="applicable: native"):
        compute_split(obd, "intervened")
