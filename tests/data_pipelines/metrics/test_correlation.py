"""Per-user Spearman against scipy, skipped constant rows, and per-user item sampling."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import data_pipelines.metrics.correlation as correlation
from data_pipelines.metrics import (
    average_ranks,
    mean_user_spearman,
    per_user_spearman,
    sample_items_per_user,
    synthetic_spearman,
)


def test_average_ranks_match_scipy_with_ties():
    x = np.random.default_rng(0).integers(0, 5, size=(30, 17)).astype(float)
    np.testing.assert_allclose(average_ranks(x), stats.rankdata(x, method="average", axis=1))
    np.testing.assert_allclose(average_ranks([[3.0, 1.0, 3.0, 2.0]]), [[3.5, 1.0, 3.5, 2.0]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_user_spearman_matches_scipy(seed):
    rng = np.random.default_rng(seed)
    true = rng.normal(size=(25, 200))
    learned = 0.5 * true + rng.normal(size=true.shape)
    learned[::3] = learned[::3].round(0)  # ties in some rows
    want = [stats.spearmanr(a, b).statistic for a, b in zip(learned, true, strict=True)]
    np.testing.assert_allclose(per_user_spearman(learned, true), want, atol=1e-12)
    mean, info = mean_user_spearman(learned, true)
    assert mean == pytest.approx(np.mean(want))
    assert info == {"n_users": 25, "n_skipped": 0}


def test_constant_and_non_finite_rows_are_skipped_and_counted():
    learned = np.array([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0], [1.0, 2.0, 3.0], [1.0, np.nan, 2.0]])
    true = np.array([[3.0, 2.0, 1.0], [1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    rho = per_user_spearman(learned, true)
    assert rho[0] == pytest.approx(-1.0) and np.isnan(rho[1:]).all()
    assert mean_user_spearman(learned, true) == (pytest.approx(-1.0), {"n_users": 1, "n_skipped": 3})
    mean, info = mean_user_spearman(learned[1:], true[1:])
    assert np.isnan(mean) and info == {"n_users": 0, "n_skipped": 3}


def test_synthetic_keys():
    rng = np.random.default_rng(4)
    s = rng.normal(size=(5, 20))
    pop = np.tile(rng.random(20), (5, 1)) * np.array([[0.0], [1.0], [2.0], [0.5], [1.5]])  # c_u * pop_i
    out = synthetic_spearman(s, s, -pop, pop)
    assert out["synthetic.interest_spearman"] == pytest.approx(1.0)
    assert out["synthetic.conformity_spearman"] == pytest.approx(-1.0)
    assert out["synthetic.conformity_spearman_skipped"] == 1.0  # the user with c_u = 0
    assert out["synthetic.conformity_spearman_users"] == 4.0
    assert set(synthetic_spearman(s, s)) == {
        "synthetic.interest_spearman",
        "synthetic.interest_spearman_users",
        "synthetic.interest_spearman_skipped",
    }


def test_sample_items_per_user_is_without_replacement_and_deterministic():
    items = sample_items_per_user(300, 1000, n=200, seed=7)
    assert items.shape == (300, 200) and items.dtype == np.int64
    assert items.min() >= 0 and items.max() < 1000
    assert (np.diff(items, axis=1) > 0).all()  # sorted, distinct
    np.testing.assert_array_equal(items, sample_items_per_user(300, 1000, n=200, seed=7))
    assert not np.array_equal(items, sample_items_per_user(300, 1000, n=200, seed=8))
    assert not np.array_equal(items[0], items[1])
    np.testing.assert_array_equal(sample_items_per_user(2, 5, n=5, seed=0), [[0, 1, 2, 3, 4]] * 2)


@pytest.mark.parametrize("n_items", [40, 12])  # distinct draws (4 n <= n_items); random keys
def test_a_users_sample_depends_on_its_position_only(monkeypatch, n_items):
    monkeypatch.setattr(correlation, "SAMPLE_BLOCK_USERS", 7)
    want = sample_items_per_user(50, n_items, n=10, seed=3)
    np.testing.assert_array_equal(sample_items_per_user(20, n_items, n=10, seed=3), want[:20])
    assert (np.diff(want, axis=1) > 0).all()


def test_rows_short_of_distinct_draws_are_drawn_again():
    class Repeats:  # the first draw of every row repeats one value; later draws are uniform
        def __init__(self):
            self.calls, self.rng = 0, np.random.default_rng(0)

        def integers(self, low, high, size):
            self.calls += 1
            return np.zeros(size, dtype=np.int64) if self.calls == 1 else self.rng.integers(low, high, size)

    stub = Repeats()
    rows = correlation._first_distinct(stub, 5, 1000, 20)
    assert stub.calls == 2 and rows.shape == (5, 20)
    assert all(np.unique(r).size == 20 for r in rows)


def test_distinct_draws_are_uniform():
    items = sample_items_per_user(20_000, 40, n=10, seed=0)  # 4 n <= n_items: the draws path
    freq = np.bincount(items.ravel(), minlength=40) / 20_000
    # each item is in a row w.p. 10/40; sd of the frequency = sqrt(.25 * .75 / 20000) = 0.0031
    np.testing.assert_allclose(freq, 0.25, atol=0.015)
    pair = np.mean((items == 0).any(axis=1) & (items == 1).any(axis=1))
    np.testing.assert_allclose(pair, 10 / 40 * 9 / 39, atol=0.01)  # without replacement


def test_sample_is_uniform():
    items = sample_items_per_user(20_000, 10, n=3, seed=0)
    freq = np.bincount(items.ravel(), minlength=10) / 20_000
    # each item is in a row w.p. 3/10; sd of the frequency = sqrt(.3 * .7 / 20000) = 0.0032
    np.testing.assert_allclose(freq, 0.3, atol=0.015)


def test_sample_checks_n():
    with pytest.raises(ValueError, match="n must be"):
        sample_items_per_user(3, 10, n=11)
