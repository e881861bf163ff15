"""Each adapter on the real files in ../shared/data (counts from their READMEs)."""

from __future__ import annotations

import polars as pl
import pytest

from data_pipelines.adapters import open_source
from data_pipelines.dataset import Dataset
from data_pipelines.ingest import ingest
from tests.plugins.data import real_data

pytestmark = pytest.mark.realdata


def _ingest(tmp_path, source, path):
    out = tmp_path / source
    summary = ingest(open_source(source, path), out)
    assert summary["rows_in"] == summary["rows_accepted"] + summary["rows_rejected"]
    return Dataset(out), summary


def test_taobao_time_slice(tmp_path):
    ds, s = _ingest(tmp_path, "taobao", real_data("taobao-userbehavior-sample") / "time_slice_2h.csv")
    assert (s["rows_in"], s["rows_rejected"], s["users"], s["items"]) == (110_300, 0, 66_454, 84_793)
    assert s["events_by_type"] == {"buy": 2_493, "cart": 6_063, "fav": 3_383, "view": 98_361}
    assert (s["ts_min"], s["ts_max"]) == ("2017-11-26T01:00:00+00:00", "2017-11-26T03:10:11+00:00")
    assert ds.items()["category"].null_count() == 0
    assert ds.items().height == ds.idmap("items").height == 84_793


def test_taobao_folder_dedupes_across_files(tmp_path):
    _, s = _ingest(tmp_path, "taobao", real_data("taobao-userbehavior-sample"))
    # The two samples overlap: the 114 users' events inside the 2-hour window appear in both.
    assert s["rows_in"] == 120_300
    assert s["rows_rejected"] == s["rows_in"] - s["rows_written"] > 0
    rejects = pl.read_parquet(ds_rejects := tmp_path / "taobao" / "rejects")
    assert set(rejects["reason"]) == {"exact duplicate of an earlier record"}, ds_rejects


def test_amazon_s3rec(tmp_path):
    ds, s = _ingest(tmp_path, "amazon-s3rec", real_data("amazon-beauty-5core-s3rec"))
    assert (s["rows_in"], s["rows_written"], s["users"], s["items"]) == (22_363, 198_502, 22_363, 12_101)
    assert s["events_by_type"] == {"buy": 198_502} and s["ts_min"] is None
    u1 = ds.interactions().filter(pl.col("user_id") == "1").collect().sort("seq")
    assert u1["item_id"].to_list() == ["1", "2", "3", "4", "5"] and u1["seq"].to_list() == [0, 1, 2, 3, 4]
    attrs = ds.items().filter(pl.col("item_id") == "4")["attributes"].to_list()[0]
    assert attrs == ["1", "2", "3"]


def test_movielens(tmp_path):
    ds, s = _ingest(tmp_path, "movielens", real_data("movielens-100k"))
    assert (s["rows_in"], s["rows_rejected"], s["users"], s["items"]) == (100_000, 0, 943, 1_682)
    assert (s["ts_min"], s["ts_max"]) == ("1997-09-20T03:05:10+00:00", "1998-04-22T23:10:38+00:00")
    toy = ds.items().filter(pl.col("item_id") == "1").row(0, named=True)
    assert toy["category"] == "Animation" and toy["attributes"] == ["Animation", "Children's", "Comedy"]
    u1 = ds.users().filter(pl.col("user_id") == "1")["features"].to_list()[0]
    assert {f["key"]: f["value"] for f in u1} == {
        "age": "24",
        "gender": "M",
        "occupation": "technician",
        "zip": "85711",
    }
    assert ds.interactions().select(pl.col("value").mean()).collect().item() == pytest.approx(3.52986)


def test_coat(tmp_path):
    ds, s = _ingest(tmp_path, "coat", real_data("coat"))
    assert (s["rows_in"], s["rows_rejected"], s["users"], s["items"]) == (11_600, 0, 290, 300)
    by_policy = ds.interactions().group_by("logging_policy").len().collect()
    assert dict(by_policy.iter_rows()) == {"self_selected": 6_960, "uniform_random": 4_640}
    assert ds.interactions().select(pl.col("ts").null_count()).collect().item() == 11_600
    props = ds.table("observation_propensities")
    assert props.height == 290 * 300 and props["propensity"].is_between(0, 1, closed="right").all()
    u0 = {f["key"]: f["value"] for f in ds.users().filter(pl.col("user_id") == "0")["features"].to_list()[0]}
    assert set(u0) == {"gender", "age", "location", "fashioninterest"}
    assert ds.items()["category"].null_count() == 0


def test_open_bandit(tmp_path):
    ds, s = _ingest(tmp_path, "obd", real_data("open-bandit-dataset-small"))
    assert (s["rows_in"], s["rows_rejected"], s["users"], s["items"]) == (40_000, 0, 0, 80)
    assert s["events_by_type"]["impression"] == 40_000
    df = ds.interactions().collect()
    clicks = df.filter(pl.col("event") == "impression").group_by("logging_policy").agg(pl.col("value").sum())
    assert s["events_by_type"]["click"] == int(clicks["value"].sum())
    rnd = df.filter(
        (pl.col("logging_policy") == "uniform_random") & pl.col("item_id").str.starts_with("men:")
    )
    assert rnd["propensity"].unique().to_list() == [pytest.approx(1 / 34)]
    assert df["request_id"].str.contains(r"^obd:(men|women):(uniform_random|obd_bts):\d+$").all()
    assert df["user_id"].null_count() == df.height
    ctx = ds.contexts()
    assert ctx.height == 40_000
    keys = {f["key"] for f in ctx["features"][0]}
    assert {"user_feature_0", "user_feature_3", "user-item_affinity_0"} <= keys
