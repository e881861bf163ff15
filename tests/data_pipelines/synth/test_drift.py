"""Continuing a written world (``write_continuation``): old rows and ids kept, new users and items,
interest drift, the same logging policy, determinism, DIR untouched, one-line errors."""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from data_pipelines.dataset import Dataset
from data_pipelines.synth import ContinueConfig, SynthConfig, Truth, generate, write, write_continuation
from data_pipelines.synth.drift import continue_world, derived_seed, load_state, rotate
from parpo_core.errors import DataError

CFG = SynthConfig(n_users=200, n_items=150, rounds=3, seed=5)
SPEC = ContinueConfig(rounds=2, new_users=20, new_items=15, interest_drift=0.3)
FIXTURE = Path(__file__).parents[2] / "fixtures" / "release-0.1.0" / "data"


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by relative path."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(DIR, the hashes of its files before anything continued it)."""
    out = tmp_path_factory.mktemp("drift") / "dir"
    write(CFG, out, splits=False)
    return out, tree_hashes(out)


@pytest.fixture(scope="module")
def grown(base, tmp_path_factory) -> tuple[Path, dict]:
    """(NEW = DIR + 2 rounds, 20 new users, 15 new items, 30% drift; its summary)."""
    out = tmp_path_factory.mktemp("drift") / "new"
    return out, write_continuation(base[0], out, SPEC)


def _round(col: str = "session_id") -> pl.Expr:
    return pl.col(col).str.extract(r"-r(\d+)$").cast(pl.Int64)


def test_every_old_row_is_kept_and_the_new_rounds_follow(base, grown):
    old, new = Dataset(base[0]), Dataset(grown[0])
    old_rows = old.interactions().collect()
    new_rows = new.interactions().collect()
    key = ["user_id", "ts", "position", "event"]
    kept = new_rows.filter(_round() < CFG.rounds)
    assert_frame_equal(kept.sort(key), old_rows.sort(key))  # seq included
    added = new_rows.filter(_round() >= CFG.rounds)
    assert added.height + old_rows.height == new_rows.height
    assert set(added.select(_round())["session_id"].unique()) == {3, 4}
    # The same rows as the continuation drawn in memory (seq aside: the ingest assigns it).
    expected, _ = continue_world(load_state(base[0]), SPEC)
    assert_frame_equal(
        added.drop("seq").sort(key), expected.interactions.select(added.drop("seq").columns).sort(key)
    )
    # Time goes on: every new row after DIR's last, rounds at start + t days.
    assert added["ts"].min() >= CFG.start + timedelta(days=3) > old_rows["ts"].max()
    assert added["ts"].max() < CFG.start + timedelta(days=5)
    # A returning user's seq continues after their old events.
    last_old = old_rows.group_by("user_id").agg(pl.col("seq").max().alias("m"))
    first_new = added.group_by("user_id").agg(pl.col("seq").min().alias("f")).join(last_old, on="user_id")
    assert (first_new["f"] == first_new["m"] + 1).all()
    s = new.summary()
    assert s["rows_rejected"] == 0 and s["rows_written"] == new_rows.height
    assert len(new.manifest["ingests"]) == 2


def test_id_maps_grow_and_new_ids_are_in_rows_tables_and_truth(base, grown):
    old, new = Dataset(base[0]), Dataset(grown[0])
    truth = Truth(grown[0])
    for kind, prefix, n_old, n_new in (("users", "u", 200, 20), ("items", "i", 150, 15)):
        m_old, m_new = old.idmap(kind), new.idmap(kind)
        assert m_new.height == n_old + n_new
        assert_frame_equal(m_new.head(m_old.height), m_old)  # extended, never renumbered
        fresh = {f"{prefix}{k:04d}" for k in range(n_old, n_old + n_new)}
        assert set(m_new["id"].tail(n_new)) == fresh
        ids = truth.user_ids if kind == "users" else truth.item_ids
        assert ids.to_list() == [f"{prefix}{k:04d}" for k in range(n_old + n_new)]  # row = number
    rows = new.interactions().collect()
    new_users = [f"u{k:04d}" for k in range(200, 220)]
    sessions = rows.filter(pl.col("user_id").is_in(new_users)).select(_round()).unique()
    assert set(sessions["session_id"]) == {3, 4}  # a session in every new round, none before
    new_items = [f"i{k:04d}" for k in range(150, 165)]
    shown = rows.filter(pl.col("item_id").is_in(new_items))
    uniform = Dataset(grown[0] / "uniform_test").interactions().collect()
    assert shown.height + uniform.filter(pl.col("item_id").is_in(new_items)).height > 0
    assert shown.filter(_round() < 3).height == 0
    assert set(new_items) <= set(new.items()["item_id"])
    assert set(new_users) <= set(new.users()["user_id"])
    feats = new.users().filter(pl.col("user_id").is_in(new_users)).explode("features").unnest("features")
    assert set(feats["key"]) == {"age_band", "region", "device"}
    assert_frame_equal(Dataset(grown[0] / "uniform_test").idmap("users"), new.idmap("users"))
    assert_frame_equal(Dataset(grown[0] / "uniform_test").idmap("items"), new.idmap("items"))


def test_drift_turns_thirty_percent_of_old_users_and_leaves_the_rest(base, grown):
    before, after = Truth(base[0]), Truth(grown[0])
    u0 = before.user_vectors
    u1 = after.user_vectors[:200]
    changed = ~(u0 == u1).all(axis=1)
    assert changed.sum() == 60  # round(0.3 * 200); the other 140 identical bit for bit
    a, b = u0[changed].astype(np.float64), u1[changed].astype(np.float64)
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), np.linalg.norm(a, axis=1), rtol=1e-5)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert np.abs(cos).max() < 1e-5  # turned by 90 degrees
    np.testing.assert_array_equal(after.item_vectors[:150], before.item_vectors)
    np.testing.assert_array_equal(after.conformity(before.user_ids), before.conformity(before.user_ids))
    drift = pl.read_parquet(grown[0] / "truth" / "drift.parquet")
    assert drift["user_id"].to_list() == before.user_ids.filter(pl.Series(changed)).to_list()
    assert (drift["round"] == 3).all() and (drift["continuation"] == 1).all()
    np.testing.assert_array_equal(np.stack(drift["vector_before"].to_numpy()), u0[changed])


def test_rotation_keeps_norms_and_turns_by_the_angle():
    rng = np.random.default_rng(0)
    u, g = rng.standard_normal((50, 8)), rng.standard_normal((50, 8))
    for degrees in (30.0, 90.0, 180.0):
        v = rotate(u, g, np.radians(degrees))
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), np.linalg.norm(u, axis=1))
        cos = (u * v).sum(1) / np.linalg.norm(u, axis=1) ** 2
        np.testing.assert_allclose(cos, np.cos(np.radians(degrees)), atol=1e-12)


def test_truth_holds_the_interest_behind_every_impression(base, grown):
    out = grown[0]
    truth = Truth(out)
    imp = pl.read_parquet(out / "truth" / "impressions.parquet")
    assert set(imp.filter(pl.col("split") == "main")["round"].unique()) == set(range(5))
    assert set(imp.filter(pl.col("split") == "uniform")["round"].unique()) == {5}  # the day after
    drifted = pl.read_parquet(out / "truth" / "drift.parquet")
    # Rounds 3-4 and the uniform test were played with the current vectors ...
    now = imp.filter((pl.col("round") >= 3) | pl.col("user_id").is_in(drifted["user_id"].implode()).not_())
    np.testing.assert_allclose(
        truth.interest(now["user_id"], now["item_id"]), now["interest"], rtol=1e-5, atol=1e-6
    )
    # ... rounds 0-2 of drifted users with the vectors they had then.
    then = imp.filter((pl.col("round") < 3) & pl.col("user_id").is_in(drifted["user_id"].implode()))
    old_u = dict(zip(drifted["user_id"], drifted["vector_before"].to_numpy(), strict=True))
    u = np.stack([old_u[x] for x in then["user_id"]]).astype(np.float64)
    v = truth.item_vectors[truth.item_index(then["item_id"])].astype(np.float64)
    np.testing.assert_allclose((u * v).sum(1) / 4.0, then["interest"], rtol=1e-5, atol=1e-6)
    items = pl.read_parquet(out / "truth" / "items.parquet")
    main = Dataset(out).interactions().filter(pl.col("event") == "impression").collect()
    assert items["exposure"].sum() == main.height == imp.filter(pl.col("split") == "main").height
    assert pl.read_parquet(out / "truth" / "interest.parquet").height == 220 * 165
    expo = pl.read_parquet(out / "truth" / "exposure.parquet")
    assert expo.group_by("round").len().sort("round")["len"].to_list() == [150] * 3 + [165] * 2
    meta = json.loads((out / "truth" / "meta.json").read_text())
    assert SynthConfig.model_validate(meta["config"]) == CFG and meta["config_digest"] == CFG.digest()
    (rec,) = meta["continuations"]
    assert rec["first_round"] == 3 and rec["rounds"] == 2 and rec["drifted_users"] == 60
    assert rec["seed"] == derived_seed(CFG.seed, 1) and rec["seed_derived"]
    assert rec["parent_fingerprint"] == Dataset(base[0]).fingerprint


def _mean_gap(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(|mean a - mean b|, 4 standard errors of that difference for independent samples)."""
    gap = abs(a.mean() - b.mean())
    return gap, 4 * np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)


def test_without_drift_the_first_new_round_is_another_round_of_the_original(tmp_path):
    """Continuing a 3-round world by 1 round vs drawing the same world with 4 rounds.

    Per-purpose streams make rounds 0-2 of both identical, so the policy's state before round 3
    must be equal exactly; round 3 itself has other random draws, so its click rate, the mean
    popularity and mean true interest of what was shown must agree within 4 standard errors of
    a difference of two independent samples of 10,000 impressions (a miss by chance: ~6e-5).
    A continuation that dropped the popularity state would show round 0's behaviour instead:
    the last assertion checks that the tolerance tells the two apart.
    """
    cfg = SynthConfig(n_users=1000, n_items=300, rounds=3, seed=2)
    write(cfg, tmp_path / "dir", splits=False)
    write_continuation(tmp_path / "dir", tmp_path / "new", ContinueConfig(rounds=1), splits=False)
    longer = generate(cfg.model_copy(update={"rounds": 4}))
    expo = pl.read_parquet(tmp_path / "new" / "truth" / "exposure.parquet")
    assert_frame_equal(expo.filter(pl.col("round") == 3), longer.exposure.filter(pl.col("round") == 3))
    cont = pl.read_parquet(tmp_path / "new" / "truth" / "impressions.parquet")
    ours = cont.filter((pl.col("split") == "main") & (pl.col("round") == 3))
    same = longer.impressions.filter((pl.col("split") == "main") & (pl.col("round") == 3))
    assert ours.height == same.height == 10_000
    assert not ours["click"].equals(same["click"])  # other draws
    for col in ("click", "popularity", "interest"):
        gap, tol = _mean_gap(ours[col].cast(pl.Float64).to_numpy(), same[col].cast(pl.Float64).to_numpy())
        assert gap < tol, (col, gap, tol)
    first = longer.impressions.filter((pl.col("split") == "main") & (pl.col("round") == 0))
    gap, tol = _mean_gap(
        first["click"].cast(pl.Float64).to_numpy(), same["click"].cast(pl.Float64).to_numpy()
    )
    assert gap > tol


def test_same_arguments_give_the_same_bytes_and_dir_is_untouched(base, tmp_path):
    root, before = base
    a = write_continuation(root, tmp_path / "a", SPEC, splits=False)
    b = write_continuation(root, tmp_path / "b", SPEC, splits=False)
    assert a["fingerprint"] == b["fingerprint"]
    assert a["uniform_test"]["fingerprint"] == b["uniform_test"]["fingerprint"]
    ta, tb = tree_hashes(tmp_path / "a" / "truth"), tree_hashes(tmp_path / "b" / "truth")
    assert ta == tb and "centroids.parquet" in ta
    ma, mb = Dataset(tmp_path / "a").manifest, Dataset(tmp_path / "b").manifest
    assert {k: t["sha256"] for k, t in ma["tables"].items()} == {
        k: t["sha256"] for k, t in mb["tables"].items()
    }
    other = write_continuation(root, tmp_path / "c", SPEC.model_copy(update={"seed": 11}), splits=False)
    assert other["fingerprint"] != a["fingerprint"] and other["synth"]["seed"] == 11
    assert tree_hashes(root) == before  # DIR: same files, same bytes


def test_a_continued_world_continues_again(grown, tmp_path):
    out = tmp_path / "again"
    s = write_continuation(grown[0], out, ContinueConfig(rounds=1, new_users=3), splits=False)
    rec = s["synth"]["continuation"]
    assert rec["continuation"] == 2 and rec["first_round"] == 5 and rec["users"] == 223
    assert rec["seed"] == derived_seed(CFG.seed, 2) != derived_seed(CFG.seed, 1)
    truth = Truth(out)
    np.testing.assert_array_equal(truth.user_vectors[:220], Truth(grown[0]).user_vectors)  # no drift asked
    assert pl.read_parquet(out / "truth" / "drift.parquet").height == 60  # the first continuation's
    rows = Dataset(out).interactions().collect()
    assert rows.select(_round())["session_id"].max() == 5
    assert Dataset(out).summary()["users"] == 223


def test_bad_inputs_are_one_line_and_write_nothing(base, tmp_path):
    root = base[0]
    cases = [
        (root / "uniform_test", "not a synthetic dataset"),  # a dataset without truth/
        (tmp_path / "nowhere", "not a synthetic dataset"),
        (root / "truth", "not truth/ itself"),
        (FIXTURE, "lacks centroids.parquet"),  # written before continuations existed
    ]
    damaged = tmp_path / "damaged"
    shutil.copytree(root, damaged)
    (damaged / "truth" / "centroids.parquet").unlink()
    (damaged / "truth" / "conformity.parquet").unlink()
    cases.append((damaged, "lacks conformity.parquet, centroids.parquet"))
    for src, match in cases:
        out = tmp_path / "out"
        with pytest.raises(DataError, match=match) as e:
            write_continuation(src, out, SPEC, splits=False)
        assert "\n" not in str(e.value)
        assert not out.exists()
    with pytest.raises(DataError, match="outside"):
        write_continuation(root, root / "inside", SPEC, splits=False)
    assert not (root / "inside").exists()
    late = SPEC.model_copy(update={"rounds": 400_000})
    with pytest.raises(DataError, match="synth.start"):
        write_continuation(root, tmp_path / "late", late, splits=False)


def test_truth_serves_the_reward_models_synthetic_evaluation(grown):
    from reward_models.data import RewardData
    from reward_models.evaluate import truth_sample

    data = RewardData.load(grown[0], "temporal", 0)
    t = truth_sample(data, n=30, seed=0)
    assert t is not None and t.user_vectors.shape == (220, 16) and t.item_vectors.shape == (165, 16)
    truth = Truth(grown[0])
    uid, iid = data.users["id"].to_numpy(), data.items["id"].to_numpy()
    want = truth.interest(np.repeat(uid[t.users], t.items.shape[1]), iid[t.items].ravel())
    np.testing.assert_allclose(t.interest.ravel(), want, rtol=1e-6)
