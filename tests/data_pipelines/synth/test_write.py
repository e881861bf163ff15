"""The written dataset: canonical through the real ingest, uniform_test sharing id maps, truth/ API."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data_pipelines.dataset import Dataset
from data_pipelines.synth import SynthConfig, Truth, generate, true_interest, truth, write
from parpo_core.errors import DataError

CFG = SynthConfig(n_users=150, n_items=400, rounds=5, seed=7)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "ds"
    summary = write(CFG, out, splits=False)
    return out, summary


def test_dataset_opens_with_no_rejects(written):
    out, summary = written
    ds = Dataset(out)
    s = ds.summary()
    assert s["source"] == "synthetic"
    assert s["rows_in"] == s["rows_accepted"] == s["rows_written"] > 0
    assert s["rows_rejected"] == 0
    assert summary["fingerprint"] == ds.fingerprint and summary["rows_in"] == s["rows_in"]
    data = generate(CFG)
    assert s["rows_in"] == data.interactions.height
    assert s["users"] == CFG.n_users
    assert ds.items().height == ds.idmap("items").height == CFG.n_items  # catalogue-only items included
    feats = ds.users().explode("features").unnest("features")
    assert set(feats["key"].unique()) == {"age_band", "region", "device"}
    assert summary["synth"]["splits"] == "not requested"


def test_written_rows_equal_the_generated_rows(written):
    out, _ = written
    rows = Dataset(out).interactions().drop("seq").collect()
    expected = generate(CFG).interactions
    key = ["user_id", "ts", "position", "event"]
    assert_frame_equal(rows.sort(key), expected.select(rows.columns).sort(key))


def test_uniform_test_shares_the_id_maps(written):
    out, summary = written
    main, uni = Dataset(out), Dataset(out / "uniform_test")
    s = uni.summary()
    assert s["rows_rejected"] == 0 and s["rows_in"] == s["rows_accepted"] > 0
    assert summary["uniform_test"]["fingerprint"] == uni.fingerprint
    for kind in ("users", "items"):
        shared = uni.idmap(kind).join(main.idmap(kind), on="id", suffix="_main")
        assert shared.height == uni.idmap(kind).height
        assert (shared["index"] == shared["index_main"]).all()
        assert_frame_equal(uni.idmap(kind), main.idmap(kind))  # every id is in the main maps
    assert (uni.interactions().select("logging_policy").collect()["logging_policy"] == "uniform").all()


def test_truth_api_matches_the_stored_vectors_and_scores(written):
    out, _ = written
    t = Truth(out)
    stored = pl.read_parquet(out / "truth" / "interest.parquet")
    assert stored.height == CFG.n_users * CFG.n_items
    sample = stored.sample(2000, seed=0)
    got = true_interest(out, sample["user_id"], sample["item_id"].to_list())
    np.testing.assert_allclose(got, sample["interest"].to_numpy(), rtol=1e-5, atol=1e-5)
    # By hand from the vector files: s = u . v / sqrt(dim).
    uv = pl.read_parquet(out / "truth" / "user_vectors.parquet").filter(pl.col("user_id") == "u0003")
    iv = pl.read_parquet(out / "truth" / "items.parquet").filter(pl.col("item_id") == "i0010")
    by_hand = np.dot(uv["vector"][0].to_numpy(), iv["vector"][0].to_numpy()) / np.sqrt(CFG.dim)
    assert t.interest(["u0003"], ["i0010"])[0] == pytest.approx(by_hand, rel=1e-5)
    matrix = t.interest_matrix(["u0003", "u0004"], ["i0010", "i0011", "i0012"])
    assert matrix.shape == (2, 3) and matrix[0, 0] == pytest.approx(by_hand, rel=1e-5)
    # The same numbers the generator used.
    data = generate(CFG)
    np.testing.assert_allclose(
        t.interest_matrix(), data.user_vectors.astype(float) @ data.item_vectors.T / 4.0
    )
    imp = pl.read_parquet(out / "truth" / "impressions.parquet")
    np.testing.assert_allclose(t.interest(imp["user_id"], imp["item_id"]), imp["interest"].to_numpy())


def test_truth_conformity_items_and_meta(written):
    out, _ = written
    t = Truth(out / "truth")
    conf = pl.read_parquet(out / "truth" / "conformity.parquet")
    np.testing.assert_array_equal(t.conformity(conf["user_id"]), conf["conformity"].to_numpy())
    assert (conf["conformity"] >= 0).all()
    items = pl.read_parquet(out / "truth" / "items.parquet")
    assert items.columns == ["item_id", "vector", "category", "attributes", "price", "exposure", "clicks"]
    main = Dataset(out).interactions().filter(pl.col("event") == "impression").collect()
    assert items["exposure"].sum() == main.height
    meta = json.loads((out / "truth" / "meta.json").read_text())
    assert SynthConfig.model_validate(meta["config"]) == CFG
    assert set(meta["columns"]) <= set(meta["files"]) | {"meta.json"}
    assert not list(out.glob(".truth*"))  # no staging leftovers


def test_unknown_ids_and_mismatched_lengths_are_readable_errors(written):
    out, _ = written
    with pytest.raises(DataError, match="unknown user id 'nobody'"):
        true_interest(out, ["u0000", "nobody"], ["i0000", "i0001"])
    with pytest.raises(ValueError, match="same length"):
        true_interest(out, ["u0000"], ["i0000", "i0001"])
    with pytest.raises(DataError, match="truth/meta.json"):
        Truth(out / "interactions")


def test_refuses_a_non_empty_folder_unless_overwriting_a_synthetic_one(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="not empty"):
        write(CFG, other, splits=False)
    assert (other / "notes.txt").exists()
    small = SynthConfig(n_users=20, n_items=40, rounds=2)
    out = tmp_path / "ds"
    first = write(small, out, splits=False)
    with pytest.raises(DataError, match="overwrite"):
        write(small, out, splits=False)
    again = write(small.model_copy(update={"seed": 1}), out, overwrite=True, splits=False)
    assert again["fingerprint"] != first["fingerprint"]
    assert len(Dataset(out).manifest["ingests"]) == 1


def test_same_seed_writes_the_same_dataset(tmp_path):
    small = SynthConfig(n_users=20, n_items=40, rounds=2)
    a = write(small, tmp_path / "a", splits=False)
    b = write(small, tmp_path / "b", splits=False)
    assert a["fingerprint"] == b["fingerprint"]
    assert a["uniform_test"]["fingerprint"] == b["uniform_test"]["fingerprint"]


def test_large_worlds_store_only_observed_pairs(tmp_path, monkeypatch):
    monkeypatch.setattr(truth, "ALL_PAIRS_LIMIT", 100)
    small = SynthConfig(n_users=20, n_items=40, rounds=2)
    out = tmp_path / "ds"
    write(small, out, splits=False)
    stored = pl.read_parquet(out / "truth" / "interest.parquet")
    imp = pl.read_parquet(out / "truth" / "impressions.parquet")
    assert stored.height == imp.select("user_id", "item_id").unique().height < 20 * 40
    np.testing.assert_allclose(
        true_interest(out, stored["user_id"], stored["item_id"]),
        stored["interest"].to_numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
    assert json.loads((out / "truth" / "meta.json").read_text())["interest_pairs"] == "observed"


def test_a_start_the_ingest_would_reject_is_refused_up_front(tmp_path):
    future = SynthConfig(n_users=20, n_items=40, rounds=2, start="2999-01-01T00:00:00Z")
    with pytest.raises(DataError, match="synth.start"):
        write(future, tmp_path / "ds")
    assert not (tmp_path / "ds").exists()
