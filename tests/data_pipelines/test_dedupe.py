"""The dedupe key set: exact membership over sorted runs, base keys kept apart."""

from __future__ import annotations

import numpy as np
import polars as pl

from data_pipelines.dedupe import KeySet, first_in_batch, first_new


def test_membership_matches_a_python_set_across_many_runs():
    rng = np.random.default_rng(0)
    ks, ref = KeySet(), set()
    for _ in range(20):  # more runs than the compaction threshold
        h1 = rng.integers(0, 50, 100, dtype=np.uint64)  # many equal h1 values: the rare path too
        h2 = rng.integers(0, 2**63, 100, dtype=np.uint64)
        q1, q2 = np.concatenate([h1, h1[:10]]), np.concatenate([h2, h2[:10] + np.uint64(1)])
        got = ks.contains(q1, q2)
        assert got.tolist() == [(a, b) in ref for a, b in zip(q1.tolist(), q2.tolist(), strict=True)]
        ks.add(h1, h2)
        ref |= set(zip(h1.tolist(), h2.tolist(), strict=True))
    assert len(ks) == 2000


def test_first_new_marks_repeats_and_known_keys():
    base = pl.DataFrame({"h1": np.array([1], np.uint64), "h2": np.array([9], np.uint64)})
    ks = KeySet(base)
    h1 = np.array([1, 2, 2, 3], np.uint64)
    h2 = np.array([9, 5, 5, 7], np.uint64)
    assert first_new(h1, h2, ks).tolist() == [False, True, False, True]
    ks.add(np.array([2], np.uint64), np.array([5], np.uint64))
    assert ks.to_frame().rows() == [(2, 5)]  # the base is not re-written
    assert len(ks) == 2


def test_first_in_batch_resolves_keys_sharing_h1():
    # Equal h1 with different h2 (a 64-bit collision), interleaved with a true repeat.
    h1 = np.array([1, 1, 4, 1, 1], np.uint64)
    h2 = np.array([5, 6, 0, 5, 7], np.uint64)
    assert first_in_batch(h1, h2).tolist() == [True, True, True, False, True]


def test_filter_false_positives_are_resolved_exactly():
    # Keys that share the filter's slot (same top bits of h2) but are not in the set.
    ks = KeySet()
    top = np.uint64(0xABC) << np.uint64(52)
    ks.add(np.array([10, 11], np.uint64), np.array([top | np.uint64(1), top | np.uint64(2)], np.uint64))
    q1 = np.array([10, 10, 11, 12], np.uint64)
    q2 = np.array([top | np.uint64(1), top | np.uint64(2), top | np.uint64(2), top | np.uint64(2)], np.uint64)
    assert ks.contains(q1, q2).tolist() == [True, False, True, False]


def test_first_new_matches_a_python_set_over_batches():
    rng = np.random.default_rng(1)
    ks, ref = KeySet(), set()
    for _ in range(12):
        h1 = rng.integers(0, 40, 300, dtype=np.uint64)  # h1 collides often, h2 tells keys apart
        h2 = rng.integers(0, 3, 300, dtype=np.uint64) << np.uint64(62)
        want = []
        for key in zip(h1.tolist(), h2.tolist(), strict=True):
            want.append(key not in ref)
            ref.add(key)
        new = first_new(h1, h2, ks)
        assert new.tolist() == want
        ks.add(h1[new], h2[new])
