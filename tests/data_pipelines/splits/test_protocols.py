"""The split protocols on synthetic histories: leaks, cold users, per-protocol rules."""

from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from data_pipelines.schema import INTERACTIONS, polars_schema
from data_pipelines.splits import HISTORY_SPLITS, Prepared, compute_split
from data_pipelines.splits.hashing import id_hash64

from .helpers import T0, assert_intervened_counts, keys, long_tail_rows, make_dataset, profile_size


def ordered(ds) -> pl.DataFrame:
    """The dataset's rows with rank/n per user by (ts, seq): an independent reference order."""
    return (
        ds.interactions()
        .collect()
        .sort(["user_id", "ts", "seq"])
        .with_columns(
            pl.int_range(pl.len()).over("user_id").alias("rank"), pl.len().over("user_id").alias("n")
        )
    )


def test_prepared_keeps_key_columns_of_every_row_and_all_columns_of_held_rows_only(long_tail, prepared):
    assert set(prepared.rows.columns) == {
        "__row",
        "user_id",
        "item_id",
        "ts",
        "seq",
        "__pos",
        "__uh",
        "__cold",
    }
    held = prepared.rows.filter(pl.col("__pos") | pl.col("__cold"))
    assert (
        0 < prepared.held.height == held.height < prepared.rows.height
    )  # warm users' non-positives stay out
    assert set(prepared.held.get_column("__row")) == set(held.get_column("__row"))
    # A part's canonical rows are the dataset's own rows, every column, in ORDER.
    data = long_tail.interactions().with_row_index("__row").collect()
    want = data.join(prepared.warm_positives.select("__row"), on="__row", how="semi")
    want = want.sort(["user_id", "ts", "seq", "__row"]).drop("__row")
    assert prepared.canonical(prepared.warm_positives).equals(want)


@pytest.mark.parametrize("name", HISTORY_SPLITS)
def test_no_row_in_two_parts_and_schema(long_tail, prepared, name):
    s = compute_split(long_tail, name, prepared=prepared)
    train, valid, test = keys(s.train), keys(s.valid), keys(s.test)
    assert not train & test and not train & valid and not valid & test
    assert not keys(s.cold_test) & (train | valid)
    assert not keys(s.cold_profile) & (train | valid | test | keys(s.cold_test))
    cold = set(prepared.cold_users.to_list())
    for part in (s.train, s.valid):
        assert not set(part.get_column("user_id").to_list()) & cold
    for k, part in s.parts().items():
        assert part.schema == polars_schema(INTERACTIONS), k
        if k != "cold_profile":
            assert part.get_column("event").is_in(["impression"]).sum() == 0, k
    assert s.test.height > 0 and s.train.height > 0


def test_cold_users_are_about_ten_percent_and_the_same_in_every_split(long_tail, prepared):
    n_users = long_tail.interactions().select(pl.col("user_id").n_unique()).collect().item()
    cold = prepared.cold_users.to_list()
    # Binomial(300, 0.1): mean 30, sd 5.2.
    assert 10 <= len(cold) <= 50 and n_users == 300
    for name in HISTORY_SPLITS:
        s = compute_split(long_tail, name, prepared=prepared)
        assert sorted(set(s.cold_profile.get_column("user_id"))) == cold
        assert s.meta["users"]["cold"] == len(cold)


def test_cold_users_move_with_the_seed(long_tail, prepared):
    assert Prepared.of(long_tail, seed=1).cold_users.to_list() != prepared.cold_users.to_list()


def test_cold_users_stable_when_users_are_added(tmp_path):
    # The same users, alone and with 200 more: a user's cold status and profile
    # depend only on its own id, events and the seed.
    old_rows = long_tail_rows(200, 100, seed=1)
    ds = make_dataset(tmp_path / "a", old_rows)
    before = Prepared.of(ds).cold_users.to_list()
    profile_before = compute_split(ds, "temporal").cold_profile
    more = pl.concat([old_rows, long_tail_rows(200, 100, seed=2, user_prefix="new")])
    ds = make_dataset(tmp_path / "b", more)
    after = Prepared.of(ds).cold_users.to_list()
    assert [u for u in after if not u.startswith("new")] == before
    assert any(u.startswith("new") for u in after)
    profile_after = compute_split(ds, "temporal").cold_profile
    assert profile_after.filter(~pl.col("user_id").str.starts_with("new")).equals(profile_before)


def test_cold_profile_is_the_earliest_twenty_percent_at_least_three(long_tail, prepared):
    s = compute_split(long_tail, "temporal", prepared=prepared)
    ref = ordered(long_tail).filter(pl.col("user_id").is_in(prepared.cold_users.to_list()))
    sizes = ref.group_by("user_id").agg(pl.len().alias("n"))
    want = ref.join(sizes, on="user_id", suffix="_u").filter(
        pl.col("rank") < pl.col("n").map_elements(profile_size, return_dtype=pl.Int64)
    )
    assert keys(s.cold_profile) == keys(want)
    got = s.cold_profile.group_by("user_id").len()
    assert got.get_column("len").min() >= 3
    # cold_test: the positives after the profile, nothing else.
    after = ref.filter(pl.col("rank") >= pl.col("n").map_elements(profile_size, return_dtype=pl.Int64))
    assert keys(s.cold_test) == keys(after.filter(pl.col("event") != "impression"))


def test_temporal_test_is_each_warm_users_last_positive(long_tail, prepared):
    s = compute_split(long_tail, "temporal", prepared=prepared)
    pos = ordered(long_tail).filter(
        (pl.col("event") != "impression") & ~pl.col("user_id").is_in(prepared.cold_users.to_list())
    )
    per_user = pos.group_by("user_id").agg(pl.col("seq").last().alias("last"), pl.len().alias("np"))
    held = per_user.filter(pl.col("np") >= 3)
    assert set(s.test.select("user_id", "seq").iter_rows()) == set(held.select("user_id", "last").iter_rows())
    assert s.valid.height == held.height
    assert s.train.height + s.valid.height + s.test.height == pos.height
    # Each valid row is the user's second-to-last positive: it precedes the test row.
    both = s.valid.join(s.test, on="user_id", suffix="_t")
    assert (both.get_column("ts") <= both.get_column("ts_t")).all()


def test_temporal_hand_example(tmp_path):
    # Every user: view, click, impression, buy, cart -> positives view, click, buy, cart.
    events = ["view", "click", "impression", "buy", "cart"]
    rows = pl.DataFrame(
        {
            "user_id": [f"u{u}" for u in range(40) for _ in events],
            "item_id": [f"i{k}" for _ in range(40) for k in range(5)],
            "ts": [T0 + timedelta(seconds=s) for s in range(200)],
            "event": events * 40,
        }
    )
    ds = make_dataset(tmp_path / "ds", rows)
    s = compute_split(ds, "temporal")
    warm = sorted(set(s.train.get_column("user_id")))
    assert warm and s.test.get_column("item_id").unique().to_list() == ["i4"]
    assert s.valid.get_column("item_id").unique().to_list() == ["i3"]
    assert sorted(s.train.get_column("item_id").unique().to_list()) == ["i0", "i1"]
    # Seed 0 makes u21 (only) cold. 5 events: profile = the 3 earliest (max(3, ceil(1))),
    # impression included; cold_test = the positives after it: buy, cart.
    assert s.cold_profile.get_column("user_id").unique().to_list() == ["u21"] and "u21" not in warm
    assert s.cold_profile.get_column("item_id").to_list() == ["i0", "i1", "i2"]
    assert s.cold_test.get_column("item_id").to_list() == ["i3", "i4"]
    assert s.meta["counts"] == {"train": 78, "valid": 39, "test": 39, "cold_profile": 3, "cold_test": 2}


def test_intervened_counts_per_user(long_tail, prepared):
    s = compute_split(long_tail, "intervened", prepared=prepared)
    n = prepared.warm_positives.group_by("user_id").agg(pl.len().alias("n"))
    got = {k: dict(v.group_by("user_id").len().iter_rows()) for k, v in s.parts().items()}
    assert_intervened_counts(n, got)


def normalised_entropy(items: pl.Series) -> float:
    p = items.value_counts().get_column("count").to_numpy().astype(float)
    p /= p.sum()
    return float(-(p * np.log(p)).sum() / np.log(p.size))


def gini(items: pl.Series, n_items: int) -> float:
    c = np.zeros(n_items)
    vc = items.value_counts().get_column("count").to_numpy()
    c[: vc.size] = np.sort(vc)[::-1]
    c = np.sort(c)
    i = np.arange(1, n_items + 1)
    return float(((2 * i - n_items - 1) * c).sum() / (n_items * c.sum()))


def test_intervened_test_is_flatter_than_train(long_tail, prepared):
    s = compute_split(long_tail, "intervened", prepared=prepared)
    n_items = 200
    assert gini(s.test.get_column("item_id"), n_items) < gini(s.train.get_column("item_id"), n_items) - 0.05
    # Entropy grows with sample size too, so compare test against a same-size slice of train.
    same_size = s.train.sample(s.test.height, seed=0).get_column("item_id")
    assert normalised_entropy(s.test.get_column("item_id")) > normalised_entropy(same_size)
    # And the temporal test (no intervention) is not flatter the same way.
    t = compute_split(long_tail, "temporal", prepared=prepared)
    assert gini(s.test.get_column("item_id"), n_items) < gini(t.test.get_column("item_id"), n_items)


def test_cold_users_split(long_tail, prepared):
    s = compute_split(long_tail, "cold_users", prepared=prepared)
    assert s.test.equals(s.cold_test)
    valid_users = s.valid.get_column("user_id")
    assert valid_users.is_unique().all()  # one row per validation user
    # ~10% of 270 warm users: Binomial mean 27, sd 4.9.
    assert 8 <= valid_users.len() <= 50
    last = prepared.canonical(prepared.warm_units.filter(pl.col("__prank") == pl.col("__np") - 1))
    assert keys(s.valid) <= keys(last)
    assert s.train.height + s.valid.height == prepared.warm_positives.height


def test_cold_items_split(long_tail, prepared):
    s = compute_split(long_tail, "cold_items", prepared=prepared)
    train_items = set(s.train.get_column("item_id"))
    test_items = set(s.test.get_column("item_id"))
    valid_items = set(s.valid.get_column("item_id"))
    assert not train_items & test_items and not train_items & valid_items and not test_items & valid_items
    # Every warm positive of a cold item is in test: "all their interactions moved".
    wp = prepared.warm_positives
    assert wp.filter(pl.col("item_id").is_in(list(test_items))).height == s.test.height
    assert s.train.height + s.valid.height + s.test.height == wp.height
    # The cold items are a hash of (item, seed): recompute them independently.
    items = pl.Series(sorted(set(wp.get_column("item_id"))))
    from data_pipelines.splits.hashing import uniform

    cold = items.filter(pl.Series(uniform(id_hash64(items, 0).to_numpy(), "cold_items") < 0.1))
    assert test_items == set(cold)


@pytest.mark.parametrize("name", HISTORY_SPLITS)
def test_same_seed_reproduces_other_seed_differs(long_tail, name):
    a = compute_split(long_tail, name, seed=3)
    b = compute_split(long_tail, name, seed=3)
    c = compute_split(long_tail, name, seed=4)
    for k in a.parts():
        assert a.parts()[k].equals(b.parts()[k]), k
    assert keys(a.test) != keys(c.test) or keys(a.cold_test) != keys(c.cold_test)
