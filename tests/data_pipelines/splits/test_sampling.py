"""Successive sampling (Efraimidis–Spirakis keys) against hand-computed inclusion probabilities."""

import numpy as np
import polars as pl
import pytest

from data_pipelines.splits.hashing import id_hash64, uniform
from data_pipelines.splits.sampling import draw_mask

WEIGHTS = [1.0, 2.0, 7.0]  # p = 0.1, 0.2, 0.7
N_GROUPS = 40_000


def exact_inclusion(w: list[float], k: int) -> list[float]:
    """By hand, for 3 items: P(i in a draw of 1) = p_i;
    P(i in a draw of 2) = p_i + sum_{j != i} p_j * p_i / (1 - p_j)."""
    p = np.asarray(w) / sum(w)
    if k == 1:
        return p.tolist()
    return [p[i] + sum(p[j] * p[i] / (1 - p[j]) for j in range(3) if j != i) for i in range(3)]


def test_exact_formula_by_hand():
    # p = (.1, .2, .7): P(item 0 in 2 draws) = .1 + .2*.1/.8 + .7*.1/.3 = .358333...
    assert exact_inclusion(WEIGHTS, 2)[0] == pytest.approx(0.1 + 0.025 + 0.07 / 0.3)
    assert sum(exact_inclusion(WEIGHTS, 2)) == pytest.approx(2.0)


@pytest.mark.parametrize("k", [1, 2])
def test_inclusion_frequencies_match_successive_sampling(k):
    # Many independent groups, each the same 3 items, with the hash-based uniforms
    # the splits use (one per group and row).
    group = np.repeat(np.arange(N_GROUPS), 3)
    item = np.tile(np.arange(3), N_GROUPS)
    h = id_hash64(pl.Series([f"g{g}" for g in range(N_GROUPS)]), seed=0).to_numpy()[group]
    df = pl.DataFrame({"g": group, "item": item, "w": np.tile(WEIGHTS, N_GROUPS)})
    df = df.with_columns(pl.Series("u", uniform(h, "test", item)))
    drawn = df.filter(draw_mask(pl.col("u"), pl.col("w"), pl.lit(k), "g"))
    assert drawn.group_by("g").len().get_column("len").unique().to_list() == [k]
    freq = drawn.group_by("item").len().sort("item").get_column("len").to_numpy() / N_GROUPS
    want = np.array(exact_inclusion(WEIGHTS, k))
    # Tolerance: 5 binomial standard errors (at most 5 * 0.0025 = 0.0125 for N = 40k).
    tol = 5 * np.sqrt(want * (1 - want) / N_GROUPS)
    assert np.all(np.abs(freq - want) < tol), (freq, want, tol)
    # Not proportional: with k = 2 the heavy item is included less than 2 * 0.7 (> 1) would say.
    if k == 2:
        assert freq[2] < 1.0 and want[0] > 2 * 0.1


def test_drawing_more_than_the_group_holds_takes_all():
    df = pl.DataFrame({"g": [0, 0, 1], "u": [0.3, 0.6, 0.5], "w": [1.0, 5.0, 1.0]})
    assert df.select(draw_mask(pl.col("u"), pl.col("w"), pl.lit(5), "g")).to_series().all()
