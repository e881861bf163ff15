"""Popularity-bias diagnostics on hand-computed examples."""

from __future__ import annotations

import numpy as np
import pytest

from data_pipelines.metrics import bias_metrics, gini, head_mask, recommendation_counts

# Train counts of six items: 20 interactions; the head (80% = 16) is items 0, 1, 2 (10 + 5 + 3).
POP = np.array([10, 5, 3, 1, 1, 0])
TOPK = np.array([[0, 3, 5], [0, 1, 2]])


def test_gini_by_hand():
    # G = sum_i sum_j |x_i - x_j| / (2 n^2 mean): [0, 0, 0, 1] -> 6 / (2 * 16 * 0.25) = 0.75
    assert gini([0, 0, 0, 1]) == pytest.approx(0.75)
    assert gini([1, 0, 0, 0]) == pytest.approx(0.75)  # order does not matter
    assert gini([3, 3, 3, 3]) == 0.0
    assert gini([0, 0, 0]) == 0.0
    # [2, 1, 0, 1, 0, 0]: sum of |x_i - x_j| over ordered pairs = 28; 2 n^2 mean = 2 * 36 * 4/6 = 48
    assert gini([2, 1, 0, 1, 0, 0]) == pytest.approx(28 / 48)


def test_gini_matches_the_pairwise_definition():
    x = np.random.default_rng(0).integers(0, 20, size=57).astype(float)
    pairwise = np.abs(x[:, None] - x[None, :]).sum() / (2 * x.size**2 * x.mean())
    assert gini(x) == pytest.approx(pairwise)


def test_gini_rejects_bad_input():
    with pytest.raises(ValueError, match="non-negative"):
        gini([1, -1])
    with pytest.raises(ValueError, match="empty"):
        gini([])


def test_head_is_the_prefix_covering_80_percent():
    np.testing.assert_array_equal(head_mask(POP), [True, True, True, False, False, False])
    np.testing.assert_array_equal(head_mask(POP, head_share=0.5), [True, False, False, False, False, False])
    np.testing.assert_array_equal(head_mask(POP, head_share=0.51), [True, True, False, False, False, False])
    # ties: the lower item index enters the head first
    np.testing.assert_array_equal(head_mask([1, 1, 1, 1], head_share=0.5), [True, True, False, False])
    np.testing.assert_array_equal(head_mask([0, 0, 0]), [False, False, False])
    np.testing.assert_array_equal(head_mask([7, 3], head_share=0.7), [True, False])  # exactly 70%


def test_bias_metrics_by_hand():
    m = bias_metrics(TOPK, POP, ks=(2, 3))
    # k = 2: slots 0, 3, 0, 1
    assert m["avg_pop@2"] == pytest.approx((10 + 1 + 10 + 5) / 4)
    assert m["avg_pop_norm@2"] == pytest.approx(6.5 / 10)
    assert m["tail_share@2"] == pytest.approx(1 / 4)  # item 3
    assert m["coverage@2"] == pytest.approx(3 / 6)  # items 0, 1, 3
    assert m["gini@2"] == pytest.approx(gini([2, 1, 0, 1, 0, 0]))
    # k = 3: slots 0, 3, 5, 0, 1, 2
    assert m["avg_pop@3"] == pytest.approx((10 + 1 + 0 + 10 + 5 + 3) / 6)
    assert m["tail_share@3"] == pytest.approx(2 / 6)  # items 3 and 5
    assert m["coverage@3"] == pytest.approx(5 / 6)
    # counts [2, 1, 1, 1, 0, 1]: sorted [0, 1, 1, 1, 1, 2], weights 2i - 7 = -5 .. 5, sum x = 6
    assert m["gini@3"] == pytest.approx((-3 + -1 + 1 + 3 + 2 * 5) / (6 * 6))
    assert list(m) == [
        f"{n}@{k}" for n in ("avg_pop", "avg_pop_norm", "gini", "tail_share", "coverage") for k in (2, 3)
    ]


def test_recommendation_counts_cover_the_catalogue():
    np.testing.assert_array_equal(recommendation_counts(TOPK[:, :2], 6), [2, 1, 0, 1, 0, 0])


def test_bias_metrics_check_items_and_ks():
    with pytest.raises(ValueError, match="outside the catalogue"):
        bias_metrics(TOPK, POP[:5], ks=(3,))
    with pytest.raises(ValueError, match="every k"):
        bias_metrics(TOPK, POP, ks=(4,))
