"""The dedupe key set: exact membership over sorted runs, base keys kept apart."""

from __future__ import annotations

import numpy as np
import polars as pl

from data_pipelines.dedupe import KeySet, first_new


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
