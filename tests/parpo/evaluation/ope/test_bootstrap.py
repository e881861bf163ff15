import numpy as np
import pytest

from parpo.evaluation.ope import Terms, bootstrap


def test_matches_a_plain_resampling_loop():
    rng = np.random.default_rng(3)
    num, den = rng.random(50), rng.random(50) + 0.5
    out, _ = bootstrap({"mean": Terms(num), "ratio": Terms(num, den)}, n_boot=8, seed=11)
    idx = np.random.default_rng(11).integers(0, 50, size=(8, 50))  # the same draws, one chunk
    means, ratios = num[idx].mean(axis=1), num[idx].sum(axis=1) / den[idx].sum(axis=1)
    assert out["mean"]["se"] == pytest.approx(means.std(ddof=1))
    assert out["ratio"]["ci_low"] == pytest.approx(np.quantile(ratios, 0.025))
    assert out["ratio"]["ci_high"] == pytest.approx(np.quantile(ratios, 0.975))
    assert out["ratio"]["estimate"] == pytest.approx(num.sum() / den.sum())


def test_resamples_are_shared_across_estimators():
    num = np.random.default_rng(0).random(200)
    out, _ = bootstrap({"a": Terms(num), "b": Terms(2 * num)}, n_boot=100, seed=1)
    assert out["b"]["ci_low"] == pytest.approx(2 * out["a"]["ci_low"])
    assert out["b"]["se"] == pytest.approx(2 * out["a"]["se"])
    assert out["a"]["n_boot"] == 100


def test_constant_terms_give_a_point_interval():
    out, _ = bootstrap({"c": Terms(np.full(30, 0.25))}, n_boot=20)
    assert out["c"]["ci_low"] == out["c"]["ci_high"] == pytest.approx(0.25)


def test_clusters_are_resampled_whole():
    # 40 slates of 3 rows: each slate's rows are identical, so resampling rows apart would
    # understate the spread; drawing slates matches a plain loop over slates.
    rng = np.random.default_rng(5)
    per_slate = rng.random(40)
    clusters = np.repeat(np.arange(40), 3)
    num = per_slate[clusters]
    out, _ = bootstrap({"mean": Terms(num)}, n_boot=8, seed=2, clusters=clusters)
    idx = np.random.default_rng(2).integers(0, 40, size=(8, 40))
    assert out["mean"]["se"] == pytest.approx(per_slate[idx].mean(axis=1).std(ddof=1))
    rows, _ = bootstrap({"mean": Terms(num)}, n_boot=400, seed=2)
    slates, _ = bootstrap({"mean": Terms(num)}, n_boot=400, seed=2, clusters=clusters)
    assert slates["mean"]["se"] > 1.4 * rows["mean"]["se"]  # sqrt(3) in expectation
