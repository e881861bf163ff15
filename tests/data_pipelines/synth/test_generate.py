"""The generator in memory: determinism, the exposure dynamics and the response model.

Statistical checks run on the frozen defaults (``SynthConfig()``), so they also
pin down the properties later issues rely on.
"""

from __future__ import annotations

import importlib

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from pydantic import ValidationError

from data_pipelines.schema import EVENTS
from data_pipelines.synth import SynthConfig, generate, gini

synth_generate = importlib.import_module("data_pipelines.synth.generate")  # `generate` is the function
SMALL = SynthConfig(n_users=120, n_items=300, rounds=4)


@pytest.fixture(scope="module")
def data():
    return generate(SynthConfig())


def _frames(d):
    return {
        "interactions": d.interactions,
        "uniform": d.uniform,
        "items": d.items,
        "users": d.users,
        "impressions": d.impressions,
        "exposure": d.exposure,
    }


def test_same_seed_gives_identical_frames_and_vectors():
    a, b = generate(SMALL), generate(SMALL)
    for name, frame in _frames(a).items():
        assert_frame_equal(frame, _frames(b)[name])
    np.testing.assert_array_equal(a.user_vectors, b.user_vectors)
    np.testing.assert_array_equal(a.item_vectors, b.item_vectors)
    np.testing.assert_array_equal(a.conformity, b.conformity)


def test_frames_do_not_depend_on_where_a_round_is_cut(monkeypatch):
    """play hands each round to its sink in parts of SESSIONS_PER_FRAME sessions (a large world's
    rounds do not fit in memory as one frame); the concatenated parts are the whole round's rows."""
    whole = generate(SMALL)
    sizes = []
    monkeypatch.setattr(synth_generate, "SESSIONS_PER_FRAME", 7)  # 120 users: 18 parts per round
    monkeypatch.setattr(synth_generate.Frames, "add", _counting(synth_generate.Frames.add, sizes))
    cut = generate(SMALL)
    assert len(sizes) == 18 * (SMALL.rounds + 1) and max(sizes) == 7 * SMALL.uniform_slate_size
    for name, frame in _frames(whole).items():
        assert frame.equals(_frames(cut)[name]), name
    assert cut.stats == whole.stats


def test_generate_logs_is_the_main_log_without_building_the_truth_or_the_uniform_test(monkeypatch):
    whole = generate(SMALL)

    def refuse(*args, **kwargs):
        raise AssertionError("the CSV path built a frame it does not write")

    monkeypatch.setattr(synth_generate, "impressions_frame", refuse)
    monkeypatch.setattr(synth_generate, "simulate_uniform", refuse)
    assert_frame_equal(synth_generate.generate_logs(SMALL), whole.interactions)


def _counting(add, sizes):
    def counted(self, split, rows, impressions):
        sizes.append(impressions.height)
        add(self, split, rows, impressions)

    return counted


def test_other_seed_gives_other_data():
    a, b = generate(SMALL), generate(SMALL.model_copy(update={"seed": 1}))
    assert not np.array_equal(a.user_vectors, b.user_vectors)
    assert not a.interactions.equals(b.interactions)


def test_world_does_not_depend_on_the_logging_parameters():
    """Random streams are per purpose: more rounds or larger slates leave users and items as they were."""
    a = generate(SMALL)
    b = generate(SMALL.model_copy(update={"rounds": 2, "slate_size": 5, "noise_sd": 0.0}))
    np.testing.assert_array_equal(a.user_vectors, b.user_vectors)
    np.testing.assert_array_equal(a.item_vectors, b.item_vectors)
    assert_frame_equal(a.items, b.items)


def test_gini_hand_values():
    assert gini(np.ones(4)) == 0.0
    assert gini(np.zeros(3)) == 0.0
    assert gini(np.array([0, 0, 0, 1])) == pytest.approx(0.75)  # (n - 1) / n: one holds everything
    assert gini(np.array([1, 3])) == pytest.approx(0.25)  # mean abs difference 2 / (2 * 2 * mean 2)


def test_exposure_gini_grows_over_rounds(data):
    per_round = data.stats["exposure_gini_by_round"]
    assert len(per_round) == data.config.rounds
    assert all(b > a for a, b in zip(per_round, per_round[1:], strict=False))
    assert per_round[-1] - per_round[0] > 0.2
    # The statistic is the Gini of cumulative impressions, recomputed here from the impressions.
    main = data.impressions.filter(pl.col("split") == "main")
    counts = main.group_by("item_id").len()["len"].to_numpy()
    full = np.zeros(data.config.n_items)  # gini ignores order; unseen items count as zeros
    full[: counts.size] = counts
    assert gini(full) == pytest.approx(per_round[-1], abs=1e-4)


def test_logging_policy_record_matches_the_impressions(data):
    main = data.impressions.filter(pl.col("split") == "main")
    last = data.config.rounds - 1
    before = data.exposure.filter(pl.col("round") == last).select("item_id", "exposure_before")
    seen = main.filter(pl.col("round") < last).group_by("item_id").len()
    joined = before.join(seen, on="item_id", how="left").with_columns(pl.col("len").fill_null(0))
    assert (joined["exposure_before"] == joined["len"]).all()
    probs = data.exposure.group_by("round").agg(pl.col("probability").sum())
    np.testing.assert_allclose(probs["probability"].to_numpy(), 1.0)


def test_clicked_items_are_more_interesting_than_shown_but_not_clicked(data):
    for split in ("main", "uniform"):
        imp = data.impressions.filter(pl.col("split") == split)
        clicked = imp.filter("click")["interest"].mean()
        skipped = imp.filter(~pl.col("click"))["interest"].mean()
        assert clicked - skipped > 0.8, split
    # Deeper funnel steps follow taste: buyers are more interested than clickers.
    imp = data.impressions
    assert imp.filter("buy")["interest"].mean() > imp.filter("click")["interest"].mean()


def _popularity_gap(imp: pl.DataFrame) -> float:
    """Mean popularity of clicked minus shown-not-clicked impressions."""
    return imp.filter("click")["popularity"].mean() - imp.filter(~pl.col("click"))["popularity"].mean()


@pytest.mark.parametrize("split", ["main", "uniform"])
def test_high_conformity_users_follow_popularity_more(data, split):
    imp = data.impressions.filter((pl.col("split") == split) & (pl.col("round") > 0))
    lo, hi = imp["conformity"].quantile(0.25), imp["conformity"].quantile(0.75)
    gap_hi = _popularity_gap(imp.filter(pl.col("conformity") >= hi))
    gap_lo = _popularity_gap(imp.filter(pl.col("conformity") <= lo))
    assert gap_hi > 2 * gap_lo and gap_hi - gap_lo > 0.1


def test_uniform_test_is_exposure_independent(data):
    uni = data.impressions.filter(pl.col("split") == "uniform")
    assert uni.height == data.config.n_users * data.config.uniform_slate_size
    # Random exposure: the shown items' interest is centred (the logging policy's is not selected).
    assert abs(uni["interest"].mean()) < 0.1
    assert (data.uniform["propensity"] == 1.0 / data.config.n_items).all()
    assert (data.uniform["logging_policy"] == "uniform").all()


def _features(d) -> pl.DataFrame:
    flat = d.users.explode("features").unnest("features")
    return flat.pivot("key", index="user_id", values="value")


def _mean_cosine(vecs: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    x, y = vecs[a], vecs[b]
    cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    return float(cos.mean())


def test_observable_user_features_predict_interest(data):
    feats = _features(data)
    order = np.argsort(feats["user_id"].to_numpy())  # ids u0000.. index the truth arrays
    feats = feats[order]
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, feats.height, (2, 20_000))
    a, b = a[a != b], b[a != b]
    vec = data.user_vectors

    def same(*cols: str) -> np.ndarray:
        m = np.ones(a.size, dtype=bool)
        for c in cols:
            v = feats[c].to_numpy()
            m &= v[a] == v[b]
        return m

    random_pairs = _mean_cosine(vec, a, b)
    assert abs(random_pairs) < 0.1
    both = same("region", "age_band")
    assert _mean_cosine(vec, a[both], b[both]) > random_pairs + 0.3
    region = same("region")
    assert _mean_cosine(vec, a[region], b[region]) > random_pairs + 0.15
    device = same("device")  # a distractor: drawn independently of taste
    assert abs(_mean_cosine(vec, a[device], b[device]) - random_pairs) < 0.05


def test_item_attributes_and_categories_predict_latent_vectors(data):
    items = data.items.with_row_index("k")
    vec = data.item_vectors
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, items.height, (2, 20_000))
    cat = items["category"].to_numpy()
    same_cat = (cat[a] == cat[b]) & (a != b)
    assert _mean_cosine(vec, a[same_cat], b[same_cat]) > _mean_cosine(vec, a, b) + 0.3
    attrs = items["attributes"].to_list()
    shared = np.array([bool(set(attrs[i]) & set(attrs[j])) for i, j in zip(a, b, strict=True)]) & (a != b)
    assert _mean_cosine(vec, a[shared], b[shared]) > _mean_cosine(vec, a, b) + 0.1


def test_canonical_rows_are_consistent(data):
    cfg = data.config
    for rows, k in ((data.interactions, cfg.slate_size), (data.uniform, cfg.uniform_slate_size)):
        assert set(rows["event"].unique()) <= set(EVENTS)
        imps = rows.filter(pl.col("event") == "impression")
        per_session = imps.group_by("session_id").agg(pl.len(), pl.col("position").n_unique().alias("p"))
        assert (per_session["len"] == k).all() and (per_session["p"] == k).all()
        assert rows.select(pl.struct(pl.all()).is_duplicated().any()).item() is False
        # Every event has its impression, every cart and fav its click, every buy its cart; later in time.
        key = ["session_id", "item_id"]
        first = imps.select(*key, pl.col("ts").alias("shown"))
        for child, parent in (("click", "impression"), ("cart", "click"), ("fav", "click"), ("buy", "cart")):
            c = rows.filter(pl.col("event") == child).select(*key, "ts")
            p = rows.filter(pl.col("event") == parent).select(*key, pl.col("ts").alias("t_parent"))
            joined = c.join(p, on=key, how="left")
            assert joined["t_parent"].null_count() == 0, child
            assert (joined["ts"] >= joined["t_parent"]).all(), child
            assert (c.join(first, on=key)["ts"] >= c.join(first, on=key)["shown"]).all()
        buys = rows.filter(pl.col("event") == "buy")
        assert buys["value"].null_count() == 0 and rows.filter(pl.col("event") != "buy")[
            "value"
        ].null_count() == (rows.height - buys.height)
        # ts is non-decreasing within each user (the order the rows are in).
        assert rows.select((pl.col("ts").diff().over("user_id") >= 0).fill_null(True).all()).item()
    counts = data.impressions.group_by("split").agg(pl.col("click").sum())
    assert dict(counts.iter_rows())["main"] == data.interactions.filter(pl.col("event") == "click").height


def test_config_rejects_unknown_keys_and_inconsistent_sizes():
    with pytest.raises(ValidationError, match="extra"):
        SynthConfig(n_user=5)
    with pytest.raises(ValidationError, match="at most n_items"):
        SynthConfig(n_items=5, slate_size=10)
    with pytest.raises(ValidationError, match="at most 1"):
        SynthConfig(region_weight=0.7, age_weight=0.5)
    assert SynthConfig().digest() == SynthConfig().digest() != SynthConfig(seed=1).digest()
