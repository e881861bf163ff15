import hashlib

import numpy as np
import polars as pl

from data_pipelines.splits.hashing import id_hash64, mix64, uniform


def test_id_hash_is_sha256_of_seed_and_id():
    h = id_hash64(pl.Series("u", ["alice", None, "alice", "bob"]), seed=7)
    want = int.from_bytes(hashlib.sha256(b"7\x1falice").digest()[:8], "big")
    assert h.to_list() == [want, None, want, int.from_bytes(hashlib.sha256(b"7\x1fbob").digest()[:8], "big")]
    assert h.dtype == pl.UInt64


def test_mix64_is_splitmix64():
    # SplitMix64 seeded with 0: its first output (Vigna's reference implementation).
    assert int(mix64(np.array([0], dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF


def test_uniform_is_in_open_unit_interval_and_roughly_uniform():
    h = id_hash64(pl.Series([f"user{i}" for i in range(50_000)]), seed=0).to_numpy()
    u = uniform(h, "cold_users")
    assert ((u > 0) & (u < 1)).all()
    # 50k draws: the mean's standard error is 0.0013; deciles' counts' is ~67.
    assert abs(u.mean() - 0.5) < 0.006
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert np.abs(counts - 5000).max() < 350
    # Purposes and seq give independent-looking numbers.
    v = uniform(h, "other")
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.03
    w = uniform(h, "cold_users", np.zeros(h.size, dtype=np.int64))
    assert not np.allclose(u, w)
