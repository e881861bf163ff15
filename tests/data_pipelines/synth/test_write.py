"""The written dataset: canonical through the real ingest, uniform_test sharing id maps, truth/ API."""

from __future__ import annotations

import hashlib
import importlib
import json

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data_pipelines.dataset import Dataset
from data_pipelines.synth import SynthConfig, Truth, generate, true_interest, truth, write
from parpo_core.errors import DataError

synth_write = importlib.import_module("data_pipelines.synth.write")  # the module; `write` is the function
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
    monkeypatch.setattr(truth, "PAIRS_PER_FRAME", 64)  # several frames, as in a large world
    small = SynthConfig(n_users=20, n_items=40, rounds=2)
    out = tmp_path / "ds"
    write(small, out, splits=False)
    stored = pl.read_parquet(out / "truth" / "interest.parquet")
    imp = pl.read_parquet(out / "truth" / "impressions.parquet")
    assert stored.height == imp.select("user_id", "item_id").unique().height < 20 * 40
    # By user, then item, each pair once; scored in one go, the same float32 values.
    world = generate(small).world
    u, i = world.user_ids.index_of, world.item_ids.index_of
    rows = np.asarray([(u(a), i(b)) for a, b in stored.select("user_id", "item_id").iter_rows()])
    assert (np.diff(rows[:, 0] * 40 + rows[:, 1]) > 0).all()
    want = world.interest(rows[:, 0], rows[:, 1]).astype(np.float32)
    np.testing.assert_array_equal(stored["interest"].to_numpy(), want)
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


def test_streamed_write_equals_ingesting_the_in_memory_frames(written, tmp_path):
    """write streams each round to disk; the dataset is the one the whole-log frames of generate()
    give through the same ingest, partition bytes included (so the fingerprints agree)."""
    out, _ = written
    data = generate(CFG)
    ref = tmp_path / "ref"
    data.interactions.write_parquet(tmp_path / "interactions.parquet")
    data.uniform.write_parquet(tmp_path / "uniform_test.parquet")
    synth_write._ingest_logs(ref, tmp_path, data.items, data.users, data.items, data.users, "ref")
    for sub in ("", "uniform_test"):
        got, want = Dataset(out / sub), Dataset(ref / sub)
        assert got.fingerprint == want.fingerprint
        assert got.interactions().collect().equals(want.interactions().collect())
        assert got.items().equals(want.items()) and got.users().equals(want.users())
    assert pl.read_parquet(out / "truth" / "impressions.parquet").equals(data.impressions)
    truth.write_truth(data, tmp_path / "truth")
    for f in ("interest", "items", "exposure", "user_vectors", "conformity", "centroids"):
        assert pl.read_parquet(out / "truth" / f"{f}.parquet").equals(
            pl.read_parquet(tmp_path / "truth" / f"{f}.parquet")
        ), f
    got_meta, want_meta = (json.loads((d / "truth" / "meta.json").read_text()) for d in (out, tmp_path))
    assert got_meta == want_meta and got_meta["stats"] == data.stats
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(".")]  # staging removed
    # The rows the whole-log write gave before it streamed (sha256 of the CSV text, first 16 hex).
    got = [
        Dataset(out).interactions().collect(),
        Dataset(out / "uniform_test").interactions().collect(),
        pl.read_parquet(out / "truth" / "impressions.parquet"),
    ]
    digests = [hashlib.sha256(df.write_csv().encode()).hexdigest()[:16] for df in got]
    assert digests == ["5ce7b1c960dc606c", "1ae9b251c1e3d9ae", "c782c699abb3239b"]


def test_a_failed_write_leaves_no_staging_and_the_folder_claimable(tmp_path, monkeypatch):
    small = SynthConfig(n_users=20, n_items=40, rounds=3)
    out = tmp_path / "ds"
    calls = []

    def add_then_fail(self, split, rows, impressions):
        calls.append(split)
        if len(calls) == 2:
            raise RuntimeError("disk full")
        original(self, split, rows, impressions)

    original = synth_write.Staging.add
    monkeypatch.setattr(synth_write.Staging, "add", add_then_fail)
    with pytest.raises(RuntimeError, match="disk full"):
        write(small, out, splits=False)
    assert calls == ["main", "main"] and list(tmp_path.iterdir()) == []  # round 1 failed: nothing left
    monkeypatch.setattr(synth_write.Staging, "add", original)
    assert write(small, out, splits=False)["rows_in"] == generate(small).interactions.height
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
