"""Split algorithm 2: (user, item) pairs move with all their rows; algorithm 1 kept as it was."""

from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import polars as pl
import pytest

from data_pipelines.splits import (
    HISTORY_SPLITS,
    Prepared,
    compute_split,
    load_split,
    pair_overlap,
    split_dir,
    write_split,
)
from data_pipelines.synth import SynthConfig, write
from parpo_core.errors import DataError

from .helpers import T0, assert_intervened_counts, keys, long_tail_rows, make_dataset

PAIR = ["user_id", "item_id"]


def repeat_pair_rows(seed: int = 0) -> pl.DataFrame:
    """``long_tail_rows`` plus, for about half the click rows, a later cart and sometimes a
    buy of the same item (the same pair again, interleaved with the user's other events)."""
    base = long_tail_rows(200, 120, seed=seed)
    rng = np.random.default_rng(seed + 100)
    clicks = base.filter(pl.col("event") == "click")
    again = clicks.filter(pl.Series(rng.random(clicks.height) < 0.5))
    later = pl.Series([timedelta(seconds=int(s)) for s in rng.integers(1, 3 * 10**6, again.height)])
    cart = again.with_columns(pl.col("ts") + later, pl.lit("cart").alias("event"))
    buy = cart.filter(pl.Series(rng.random(cart.height) < 0.4)).with_columns(
        pl.col("ts") + timedelta(seconds=1), pl.lit("buy").alias("event")
    )
    return pl.concat([base, cart, buy])


@pytest.fixture(scope="module")
def repeats(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("rp") / "ds", repeat_pair_rows())


def test_pair_overlap_hand_example():
    train = pl.DataFrame({"user_id": ["a", "a", "b", None], "item_id": ["x", "y", "x", "z"]})
    valid = pl.DataFrame({"user_id": ["b"], "item_id": ["y"]})
    # Test: (a, x) twice (in train), (b, y) (in valid), (b, z) nowhere, an anonymous z.
    test = pl.DataFrame({"user_id": ["a", "a", "b", "b", None], "item_id": ["x", "x", "y", "z", "z"]})
    got = pair_overlap({"train": train, "valid": valid, "test": test})
    assert got == {
        "valid_rows_in_train_pairs": 0,
        "valid_train_pairs": 0,
        "test_rows_in_train_pairs": 2,
        "test_train_pairs": 1,
        "test_rows_in_valid_pairs": 1,
        "test_valid_pairs": 1,
    }
    assert pair_overlap({"train": train}) == {}


def test_temporal_hand_example_rows_against_pairs(tmp_path):
    # Every user: click i0, click i1, buy i0, click i2, buy i1 (a second positive of i0 and i1).
    items, events = ["i0", "i1", "i0", "i2", "i1"], ["click", "click", "buy", "click", "buy"]
    rows = pl.DataFrame(
        {
            "user_id": [f"u{u}" for u in range(40) for _ in events],
            "item_id": items * 40,
            "ts": [T0 + timedelta(seconds=s) for s in range(200)],
            "event": events * 40,
        }
    )
    ds = make_dataset(tmp_path / "ds", rows)
    by_rows, by_pairs = compute_split(ds, "temporal", algorithm=1), compute_split(ds, "temporal", algorithm=2)
    # Rows: the last positive (buy i1) is test, click i2 valid; i1's click stays in train.
    assert by_rows.test.select("item_id", "event").unique().rows() == [("i1", "buy")]
    assert by_rows.valid.select("item_id", "event").unique().rows() == [("i2", "click")]
    assert pair_overlap(by_rows.parts())["test_rows_in_train_pairs"] == by_rows.test.height == 39
    # Pairs by first positive: i0 (t0), i1 (t1), i2 (t3): i2 -> test, i1 with both rows -> valid.
    assert by_pairs.test.select("item_id", "event").unique().rows() == [("i2", "click")]
    assert sorted(by_pairs.valid.select("item_id", "event").unique().rows()) == [
        ("i1", "buy"),
        ("i1", "click"),
    ]
    assert sorted(by_pairs.train.select("item_id", "event").unique().rows()) == [
        ("i0", "buy"),
        ("i0", "click"),
    ]
    # Seed 0 makes u21 (only) cold, as in the row-level hand example: 39 warm users.
    counts = by_pairs.meta["counts"]
    assert (counts["train"], counts["valid"], counts["test"]) == (78, 78, 39)
    assert by_pairs.meta["algorithm"] == 2 and by_rows.meta["algorithm"] == 1


#: The part where algorithm 1 lets a pair cross into train (none in cold_items: whole items move).
ROW_LEAK = {"temporal": "test", "intervened": "test", "cold_users": "valid"}


@pytest.mark.parametrize("name", HISTORY_SPLITS)
def test_no_pair_crosses_parts_and_every_warm_positive_has_one_part(repeats, name):
    rows = compute_split(repeats, name, algorithm=1)
    pairs = compute_split(repeats, name, algorithm=2)
    assert not any(pair_overlap(pairs.parts()).values())
    if name in ROW_LEAK:
        assert pair_overlap(rows.parts())[f"{ROW_LEAK[name]}_rows_in_train_pairs"] > 0
    # cold_users' test is the cold users' cold_test: not warm positives.
    warm_parts = [pairs.train, pairs.valid] + ([] if name == "cold_users" else [pairs.test])
    held = set().union(*map(keys, warm_parts))
    assert len(held) == sum(part.height for part in warm_parts)  # no row twice
    p = Prepared.of(repeats, algorithm=2)
    warm = p.canonical(p.warm_positives)  # the protocols' frames carry only the key columns
    # Every pair is held whole (intervened drops its undrawn pairs whole; the others drop none).
    kept = warm.join(pl.concat(warm_parts).select(PAIR), on=PAIR, how="semi")
    assert keys(kept) == held
    if name != "intervened":
        assert held == keys(warm)


def test_temporal_pairs_ordered_by_their_first_positive(repeats):
    s = compute_split(repeats, "temporal", algorithm=2)
    p = Prepared.of(repeats, algorithm=2)
    first = (
        p.warm_positives.sort("user_id", "ts", "seq")
        .group_by(PAIR, maintain_order=True)
        .agg(pl.col("seq").first(), pl.col("ts").first())
    )
    last = (
        first.group_by("user_id").agg(pl.col("item_id").last(), pl.len().alias("n")).filter(pl.col("n") >= 3)
    )
    assert set(s.test.select(PAIR).unique().iter_rows()) == set(last.select(PAIR).iter_rows())


def test_intervened_counts_pairs_per_user(repeats):

    s = compute_split(repeats, "intervened", algorithm=2)
    n = Prepared.of(repeats, algorithm=2).warm_positives.group_by("user_id").agg(pl.col("item_id").n_unique())
    got = {
        k: dict(v.group_by("user_id").agg(pl.col("item_id").n_unique()).iter_rows())
        for k, v in s.parts().items()
    }
    assert_intervened_counts(n, got)


def test_item_counts_count_rows_or_users(repeats):
    rows, pairs = Prepared.of(repeats, algorithm=1), Prepared.of(repeats, algorithm=2)
    pos = rows.history.filter("__pos")
    want_rows = dict(pos.group_by("item_id").len().iter_rows())
    want_users = dict(pos.group_by("item_id").agg(pl.col("user_id").n_unique()).iter_rows())
    assert dict(rows.item_counts.iter_rows()) == want_rows
    assert dict(pairs.item_counts.iter_rows()) == want_users != want_rows


@pytest.mark.parametrize("name", HISTORY_SPLITS)
def test_one_positive_per_pair_gives_the_same_split_under_both(long_tail, name):
    # long_tail has one row per (user, item): what ML-100K relies on to keep its anchors.
    a, b = compute_split(long_tail, name, algorithm=1), compute_split(long_tail, name, algorithm=2)
    for k, part in a.parts().items():
        assert part.equals(b.parts()[k]), k


def test_unknown_algorithm_is_one_line(repeats):
    with pytest.raises(DataError, match=r"^unknown split algorithm 3; choose 1 \(rows\) or 2 \(pairs\)$"):
        compute_split(repeats, "temporal", algorithm=3)


def test_a_split_written_before_algorithms_loads_as_algorithm_1(tmp_path):
    ds = make_dataset(tmp_path / "ds", repeat_pair_rows(seed=1))
    path = write_split(ds, "intervened", algorithm=1)
    assert path == split_dir(ds, "intervened", algorithm=1) == path.parent / path.name.removesuffix("-a2")
    assert split_dir(ds, "intervened") == path.parent / f"{path.name}-a2"
    # Today's folders: same name, meta.json without "algorithm".
    meta = json.loads((path / "meta.json").read_text())
    del meta["algorithm"]
    (path / "meta.json").write_text(json.dumps(meta))
    old = load_split(ds, "intervened", compute_missing=False, algorithm=1)
    assert old.path == path and old.meta["created"] == meta["created"]
    # It is never served as the pair split: that one is missing until computed.
    with pytest.raises(DataError, match="split is missing"):
        load_split(ds, "intervened", compute_missing=False)
    new = load_split(ds, "intervened")
    assert new.path == split_dir(ds, "intervened") and new.meta["algorithm"] == 2
    assert (
        pair_overlap(old.parts())["test_rows_in_train_pairs"]
        > 0
        == pair_overlap(new.parts())["test_rows_in_train_pairs"]
    )


@pytest.mark.integration
def test_synthetic_default_no_pair_crosses_parts(tmp_path):
    write(SynthConfig(), tmp_path / "syn", splits=False)
    from data_pipelines.dataset import Dataset

    ds = Dataset(tmp_path / "syn")
    p = Prepared.of(ds)
    for name in HISTORY_SPLITS:
        s = compute_split(ds, name, prepared=p)
        assert not any(pair_overlap(s.parts()).values()), name
        assert s.test.height > 0 and s.valid.height > 0, name
