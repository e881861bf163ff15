import hashlib

import numpy as np
import pytest

from parpo.env.transforms import HeteroScale, LevelDrift, user_bucket

USERS = [f"u{i}" for i in range(3000)]


def test_bucket_is_the_blake2b_digest_mod_n_and_roughly_uniform() -> None:
    want = int.from_bytes(hashlib.blake2b(b"7:u42", digest_size=8).digest(), "little") % 3
    assert user_bucket("u42", 3, seed=7) == want
    counts = np.bincount([user_bucket(u, 3) for u in USERS], minlength=3)
    assert counts.min() > 900  # 1000 expected each; a biased hash would miss this by far
    assert [user_bucket(u, 3, seed=1) for u in USERS] != [user_bucket(u, 3) for u in USERS]


def test_hetero_scale_is_a_u_times_preference_plus_seeded_noise() -> None:
    users = ["a", "b", "c", "a"]
    pref = np.array([0.5, 0.2, 0.9, 0.5])
    t = HeteroScale(scales=(0.1, 1.0, 10.0), sigma=0.0, seed=3)
    a = np.array([t.scale(u) for u in users])
    np.testing.assert_allclose(t(users, pref), a * pref)
    assert set(a) <= {0.1, 1.0, 10.0} and a[0] == a[3]  # one user, one scale

    noisy, replay = HeteroScale(sigma=0.1, seed=3), HeteroScale(sigma=0.1, seed=3)
    first, second = noisy(users, pref), noisy(users, pref)
    np.testing.assert_array_equal(first, replay(users, pref))  # same seed, same call: same draw
    np.testing.assert_array_equal(second, replay(users, pref))
    assert not np.allclose(first, second)  # a new call draws new noise
    assert first[0] != first[3]  # two episodes of one user in a call: independent noise


def test_hetero_noise_has_the_stated_spread() -> None:
    t = HeteroScale(scales=(1.0,), sigma=0.1, seed=0)
    resid = t(USERS, np.zeros(len(USERS)))
    assert abs(resid.std() - 0.1) < 0.01 and abs(resid.mean()) < 0.01


def test_level_drift_shifts_the_same_users_once_the_step_is_reached() -> None:
    t = LevelDrift(at=5, shift=-0.3, fraction=0.5, seed=0)
    pref = np.full(len(USERS), 0.6)
    t.step = 4
    np.testing.assert_array_equal(t(USERS, pref), pref)
    t.step = 5
    out = t(USERS, pref)
    drifted = np.array([t.drifts(u) for u in USERS])
    np.testing.assert_allclose(out[drifted], 0.3)
    np.testing.assert_allclose(out[~drifted], 0.6)
    assert drifted.mean() == pytest.approx(0.5, abs=0.03)
    assert not any(LevelDrift(at=0, fraction=0.0).drifts(u) for u in USERS[:100])
