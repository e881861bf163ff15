"""Observable interest projections (``interest_features``): off by default, exact when noiseless."""

from __future__ import annotations

import numpy as np

from data_pipelines.synth import SynthConfig, generate

SMALL = {"n_users": 60, "n_items": 50, "rounds": 2, "seed": 4}


def _features(users) -> list[dict[str, str]]:
    return [{kv["key"]: kv["value"] for kv in row} for row in users["features"].to_list()]


def test_off_by_default_and_nothing_else_changes():
    base = generate(SynthConfig(**SMALL))
    assert {k for f in _features(base.users) for k in f} == {"age_band", "region", "device"}
    with_p = generate(SynthConfig(**SMALL, interest_features=3))
    assert base.interactions.equals(with_p.interactions)
    assert base.items.equals(with_p.items) and base.uniform.equals(with_p.uniform)
    np.testing.assert_array_equal(base.world.user_vectors, with_p.world.user_vectors)
    feats = _features(with_p.users)
    assert all(set(f) == {"age_band", "region", "device", "p0", "p1", "p2"} for f in feats)
    old = _features(base.users)
    assert all(
        {k: f[k] for k in ("age_band", "region", "device")} == o for f, o in zip(feats, old, strict=True)
    )


def test_digest_of_earlier_configs_is_unchanged():
    # digests written before the field existed (generator version 1)
    assert SynthConfig().digest() == "2fd1ea7ffab96bf3"
    assert SynthConfig(seed=3, n_users=9).digest() == "3d56d4dbec3d9786"
    assert SynthConfig(interest_features=2).digest() != SynthConfig().digest()


def test_noiseless_projections_are_linear_in_the_interest_vector():
    data = generate(SynthConfig(**SMALL, interest_features=4, interest_feature_noise=0.0))
    p = np.array([[float(f[f"p{j}"]) for j in range(4)] for f in _features(data.users)])
    u = data.world.user_vectors.astype(np.float64)
    coef, *_ = np.linalg.lstsq(u, p, rcond=None)
    assert np.abs(u @ coef - p).max() < 1e-3  # only the 3-decimal rounding is left
    assert p.std(0).min() > 0.5  # each projection has about unit variance


def test_noisy_projections_still_carry_signal():
    data = generate(
        SynthConfig(**(SMALL | {"n_users": 400}), interest_features=2, interest_feature_noise=1.0)
    )
    p = np.array([[float(f[f"p{j}"]) for j in range(2)] for f in _features(data.users)])
    u = data.world.user_vectors.astype(np.float64)
    coef, *_ = np.linalg.lstsq(np.c_[u, np.ones(len(u))], p, rcond=None)
    r2 = 1 - ((np.c_[u, np.ones(len(u))] @ coef - p) ** 2).sum(0) / ((p - p.mean(0)) ** 2).sum(0)
    assert (r2 > 0.3).all() and (r2 < 0.7).all()  # signal var 1, noise var 1: R^2 about 0.5
