"""The logging policy's slate sampler and weights."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipelines.synth.exposure import popularity_weights, sample_slates


@settings(max_examples=40, deadline=None)
@given(
    n_items=st.integers(1, 30),
    k=st.integers(1, 30),
    n=st.integers(1, 50),
    skew=st.floats(0, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_slates_hold_distinct_valid_items(n_items, k, n, skew, seed):
    k = min(k, n_items)
    p = 1.0 / np.arange(1, n_items + 1) ** skew
    slates = sample_slates(np.random.default_rng(seed), p / p.sum(), n, k)
    assert slates.shape == (n, k)
    assert slates.min() >= 0 and slates.max() < n_items
    assert all(len(set(row)) == k for row in slates.tolist())


def test_first_slot_follows_the_policy_exactly():
    """Slot 1 is never redrawn, so it is a draw from p: its frequencies match p."""
    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    slates = sample_slates(np.random.default_rng(0), p, 200_000, 3)
    freq = np.bincount(slates[:, 0], minlength=p.size) / slates.shape[0]
    np.testing.assert_allclose(freq, p, atol=0.004)


def test_uniform_slates_have_uniform_position_marginals():
    slates = sample_slates(np.random.default_rng(1), np.full(10, 0.1), 100_000, 4)
    for pos in range(4):
        freq = np.bincount(slates[:, pos], minlength=10) / slates.shape[0]
        np.testing.assert_allclose(freq, 0.1, atol=0.004)


def test_too_few_items_is_an_error():
    with pytest.raises(ValueError, match="distinct"):
        sample_slates(np.random.default_rng(0), np.array([1.0, 0.0, 0.0]), 2, 2)


def test_weights_are_uniform_before_any_click_and_rich_get_richer_after():
    np.testing.assert_allclose(popularity_weights(np.zeros(4, dtype=np.int64), 1.0, 1.5), 0.25)
    w = popularity_weights(np.array([0, 1, 3]), 1.0, 1.5)  # relative clicks 0, 0.75, 2.25
    expected = np.array([1.0, 1.75**1.5, 3.25**1.5])
    np.testing.assert_allclose(w, expected / expected.sum())
    # Super-linear: the top item's share exceeds its share of (smoothed) clicks.
    assert w[2] > 3.25 / 6.0


def test_full_slates_from_skewed_weights_fall_back_to_exact_draws():
    """A slate as long as the catalogue under very skewed weights: redraws alone would take ~1e6 passes."""
    p = 1.0 / np.arange(1, 31) ** 4
    slates = sample_slates(np.random.default_rng(0), p / p.sum(), 5, 30)
    assert all(sorted(row) == list(range(30)) for row in slates.tolist())
