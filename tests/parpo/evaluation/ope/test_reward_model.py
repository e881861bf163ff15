import numpy as np
import pytest

from parpo.evaluation.ope import cross_fit
from parpo.evaluation.ope.simulate import environment, simulate


def test_predictions_are_out_of_fold():
    fb = simulate(environment(n_positions=2), 2000, seed=0)
    fold = np.random.default_rng(5).permutation(fb.n) % 2  # cross_fit's assignment for seed 5
    flipped = fb.reward.copy()
    flipped[fold == 0] = 1 - flipped[fold == 0]
    base = cross_fit(fb, k=2, seed=5)
    other = cross_fit(
        fb.__class__(fb.context, fb.action, fb.position, flipped, fb.pscore, fb.pi_e), k=2, seed=5
    )
    assert np.array_equal(base[fold == 0], other[fold == 0])  # fold 0 never saw its own rewards
    assert not np.allclose(base[fold == 1], other[fold == 1])


def test_learns_the_click_rates():
    env = environment(n_contexts=5, n_actions=4, n_positions=2)
    fb = simulate(env, 40_000, seed=1)
    q = cross_fit(fb, k=3)
    truth = env.q[fb.context, :, fb.position]
    assert q.shape == (fb.n, 4) and np.abs(q - truth).mean() < 0.03


def test_needs_two_folds():
    with pytest.raises(ValueError, match="k >= 2"):
        cross_fit(simulate(environment(), 100, seed=0), k=1)
