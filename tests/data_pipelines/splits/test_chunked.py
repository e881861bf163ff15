"""Splits of large logs cut by user range: the same folders as one cut, range by range."""

import shutil
from datetime import timedelta

import polars as pl
import pytest

from data_pipelines.splits import ALGORITHMS, compute_split, load_split, read_split, write_all
from data_pipelines.splits import store as store_mod
from data_pipelines.splits.chunked import n_rows, user_ranges

from .helpers import T0, long_tail_rows, make_dataset


def _with_anonymous(rows: pl.DataFrame, n: int = 40) -> pl.DataFrame:
    """``rows`` plus ``n`` anonymous clicks (no user, one request each)."""
    anon = pl.DataFrame(
        {
            "request_id": [f"r{k}" for k in range(n)],
            "item_id": [f"i{k % 7}" for k in range(n)],
            "ts": [T0 + timedelta(seconds=k) for k in range(n)],
            "event": ["click"] * n,
        }
    ).with_columns(pl.lit(None, dtype=pl.String).alias("user_id"))
    return pl.concat([rows, anon], how="diagonal")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    return make_dataset(
        tmp_path_factory.mktemp("ck") / "ds", _with_anonymous(long_tail_rows(120, 80, seed=3))
    )


def test_user_ranges_cut_the_sorted_ids_by_the_rows_before_each_user(tmp_path):
    users = ["c"] * 4 + ["a"] * 3 + ["d"] + ["b"] * 2
    rows = pl.DataFrame(
        {
            "user_id": users,
            "item_id": [f"i{k}" for k in range(len(users))],
            "ts": [T0 + timedelta(seconds=k) for k in range(len(users))],
            "event": ["click"] * len(users),
        }
    )
    ds = make_dataset(tmp_path / "ds", _with_anonymous(rows, 2))
    assert n_rows(ds) == 12
    # Rows before each user, in id order: a 0, b 3, c 5, d 9; ranges of 4 rows: a b | c | d.
    assert user_ranges(ds, 4).to_list() == ["c", "d"]
    assert user_ranges(ds, 5).to_list() == ["c"]  # d starts at 9: still range 1
    assert user_ranges(ds, 12) is None


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_splits_cut_by_range_equal_one_cut(tmp_path, mixed, algorithm):
    one, ranged = tmp_path / "one", tmp_path / "ranged"
    for d in (one, ranged):
        shutil.copytree(mixed.root, d)
    ds_one, ds_ranged = type(mixed)(one), type(mixed)(ranged)
    assert len(user_ranges(ds_ranged, 300)) >= 5
    a = write_all(ds_one, algorithm=algorithm)
    b = write_all(ds_ranged, algorithm=algorithm, chunk_rows=300)
    assert sorted(a) == sorted(b) == ["cold_items", "cold_users", "intervened", "temporal"]
    for name in a:
        x, y = read_split(a[name]), read_split(b[name])
        assert {k: v for k, v in x.meta.items() if k != "created"} == {
            k: v for k, v in y.meta.items() if k != "created"
        }
        assert x.parts().keys() == y.parts().keys()
        for part, df in x.parts().items():
            assert df.equals(y.parts()[part]), (name, part)
    # Nothing left beside the splits: the spilled ranges and staging folders are gone.
    assert sorted(p.name for p in (ranged / "splits").iterdir()) == sorted(a)
    assert all(not p.name.startswith(".") for d in (ranged / "splits").iterdir() for p in d.iterdir())


def test_load_split_cuts_a_log_over_the_limit_by_range(tmp_path, mixed, monkeypatch):
    shutil.copytree(mixed.root, tmp_path / "ds")
    ds = type(mixed)(tmp_path / "ds")
    cuts = []

    def small_ranges(dataset, chunk_rows=store_mod.CHUNK_ROWS):
        cuts.append(chunk_rows)
        return user_ranges(dataset, 250)

    monkeypatch.setattr(store_mod, "user_ranges", small_ranges)
    got = load_split(ds, "intervened")
    assert cuts and got.path is not None
    want = compute_split(ds, "intervened")
    for part, df in want.parts().items():
        assert df.equals(got.parts()[part]), part


def test_load_split_of_a_read_only_large_log_cuts_it_in_memory(tmp_path, mixed, monkeypatch):
    shutil.copytree(mixed.root, tmp_path / "ds")
    ds = type(mixed)(tmp_path / "ds")
    monkeypatch.setattr(store_mod, "user_ranges", lambda dataset, chunk_rows=0: user_ranges(dataset, 250))

    def read_only(*args, **kwargs):
        raise PermissionError("read-only")

    monkeypatch.setattr(store_mod, "publish_dir", read_only)
    got = load_split(ds, "temporal")
    assert got.path is None
    want = compute_split(ds, "temporal")
    for part, df in want.parts().items():
        assert df.equals(got.parts()[part]), part
    left = list((tmp_path / "ds" / "splits").rglob("*"))
    assert [p.name for p in left] == ["temporal"] and left[0].is_dir()  # no spill or staging left
