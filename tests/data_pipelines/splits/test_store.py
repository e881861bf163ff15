"""Split folders: layout, meta.json, atomic publication, recomputation when the data change."""

import json
import shutil

import polars as pl
import pytest

from data_pipelines.splits import (
    PositivesRule,
    Split,
    applicable_splits,
    compute_split,
    load_split,
    split_dir,
    train_popularity,
    write_all,
    write_split,
)
from parpo_core.errors import DataError, UserError

from .helpers import long_tail_rows, make_dataset


@pytest.fixture
def ds(tmp_path):
    return make_dataset(tmp_path / "ds", long_tail_rows(120, 80, seed=5))


def test_write_split_layout_and_meta(ds):
    rule = PositivesRule(events=("click", "buy"), weights={"buy": 2.0})
    path = write_split(ds, "temporal", seed=2, rule=rule)
    assert path == ds.root / "splits" / "temporal" / f"2-{rule.rule_hash()}-a2"
    meta = json.loads((path / "meta.json").read_text())
    assert meta["name"] == "temporal" and meta["seed"] == 2 and meta["algorithm"] == 2
    assert meta["rule"] == {"events": ["click", "buy"], "min_value": None, "weights": {"buy": 2.0}}
    assert meta["rule_hash"] == rule.rule_hash()
    assert meta["data_fingerprint"] == ds.fingerprint
    assert set(meta["counts"]) == {"train", "valid", "test", "cold_profile", "cold_test"}
    for part, n in meta["counts"].items():
        assert pl.read_parquet(path / f"{part}.parquet").height == n
    assert {"created", "source", "schema_version"} <= set(meta)
    # Only the published folder remains: no temp siblings.
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    # The rule decides the rows: views are not positives under this rule.
    assert not (pl.read_parquet(path / "train.parquet").get_column("event") == "view").any()


def test_write_split_keeps_a_current_folder(ds):
    path = write_split(ds, "intervened")
    created = json.loads((path / "meta.json").read_text())["created"]
    assert write_split(ds, "intervened") == path
    assert json.loads((path / "meta.json").read_text())["created"] == created


def test_write_all_and_load_split_round_trip(ds):
    paths = write_all(ds, seed=1)
    assert list(paths) == applicable_splits(ds) == ["temporal", "intervened", "cold_users", "cold_items"]
    for name, path in paths.items():
        s = load_split(ds, name, seed=1, compute_missing=False)
        assert s.path == path
        fresh = compute_split(ds, name, seed=1)
        for k, part in fresh.parts().items():
            assert s.parts()[k].equals(part), (name, k)


def test_load_split_computes_a_missing_split(ds):
    assert not split_dir(ds, "cold_items").exists()
    with pytest.raises(DataError, match="split is missing"):
        load_split(ds, "cold_items", compute_missing=False)
    s = load_split(ds, "cold_items")
    assert s.path == split_dir(ds, "cold_items") and (s.path / "meta.json").exists()
    assert s.meta["data_fingerprint"] == ds.fingerprint


def test_load_split_recomputes_when_the_data_change(tmp_path, ds):
    # A split written for other data (the folder copied under this dataset) is stale.
    other = make_dataset(tmp_path / "other", long_tail_rows(120, 80, seed=6))
    stale = write_split(other, "temporal")
    target = split_dir(ds, "temporal")
    shutil.copytree(stale.parent, target.parent)
    assert json.loads((target / "meta.json").read_text())["data_fingerprint"] == other.fingerprint
    with pytest.raises(DataError, match="stale"):
        load_split(ds, "temporal", compute_missing=False)
    s = load_split(ds, "temporal")
    assert s.meta["data_fingerprint"] == ds.fingerprint != other.fingerprint
    assert json.loads((target / "meta.json").read_text())["data_fingerprint"] == ds.fingerprint
    assert s.test.equals(compute_split(ds, "temporal").test)
    assert [p.name for p in target.parent.iterdir()] == [target.name]


def test_load_split_recomputes_a_damaged_folder(ds):
    path = write_split(ds, "temporal")
    (path / "test.parquet").unlink()
    with pytest.raises(DataError, match="damaged"):
        load_split(ds, "temporal", compute_missing=False)
    assert load_split(ds, "temporal").test.height > 0 and (path / "test.parquet").exists()


def test_unknown_split_name(ds):
    with pytest.raises(
        UserError, match="unknown split 'tmporal' \\(did you mean 'temporal'\\?\\); known: cold_items"
    ):
        write_split(ds, "tmporal")
    with pytest.raises(DataError, match="does not apply"):
        load_split(ds, "native")


def test_train_popularity_counts_the_train_part_only():
    rows = pl.DataFrame({"item_id": ["a", "b", "a", "c", "b", "a"]})
    split = Split(train=rows, test=pl.DataFrame({"item_id": ["c", "c", "c", "c"]}))
    pop = train_popularity(split)
    assert pop.rows() == [("a", 3), ("b", 2), ("c", 1)]
    assert pop.columns == ["item_id", "count"]


def test_train_popularity_of_a_real_split(ds):
    s = load_split(ds, "intervened")
    pop = train_popularity(s)
    assert pop.get_column("count").sum() == s.train.height
    assert set(pop.get_column("item_id")) == set(s.train.get_column("item_id"))
