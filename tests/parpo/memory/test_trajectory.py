import numpy as np
import pytest

from parpo.memory.trajectory import classify, judge, thresholds

from .helpers import traj

COMPONENTS = ("task_quality", "preference")


@pytest.mark.parametrize("rule", ["strict", "pareto"])  # no ties here: both rules agree
def test_anchored_users_are_held_to_their_anchor_others_to_the_batch_quantile(rule):
    batch = [
        traj("a", 0, "c", task=0.6, pref=0.7),  # user 0: anchor 0.5 on both
        traj("b", 0, "c", task=0.6, pref=0.4),  # preference below the anchor
        traj("c", 1, "c", task=0.9, pref=0.9),  # user 1: no anchor (count 0) -> quantiles
        traj("d", 1, "c", task=0.1, pref=0.2),
    ]
    anchors = {c: (np.array([0.5, 0.5]), np.array([3, 0])) for c in COMPONENTS}
    j = judge(batch, COMPONENTS, anchors, q=0.5, rule=rule)
    # batch medians: task (0.6 + 0.6) / 2 = 0.6, preference (0.4 + 0.7) / 2 = 0.55
    assert j.high.tolist() == [True, False, True, False]
    np.testing.assert_allclose(j.margin, [0.15, 0.0, (0.3 + 0.35) / 2, (-0.5 - 0.35) / 2])


def test_lower_threshold_is_the_anchor_or_the_low_quantile():
    batch = [traj("a", 0, "c", task=0.0), traj("b", 0, "c", task=1.0), traj("c", 0, "c", task=2.0)]
    r, upper, lower = thresholds(batch, COMPONENTS, None, q=0.75)
    np.testing.assert_allclose(upper[:, 0], 1.5)
    np.testing.assert_allclose(lower[:, 0], 0.5)
    assert r.shape == (3, 2)


def test_centred_margin_is_against_the_middle_of_the_thresholds():
    # task 0, 1, 2 (preference 1.0 each, so its quantiles are 1.0): upper 1.5, lower 0.5 -> middle 1.0
    batch = [traj("a", 0, "c", task=0.0), traj("b", 0, "c", task=1.0), traj("c", 0, "c", task=2.0)]
    j = judge(batch, COMPONENTS, None, q=0.75, rule="pareto")
    np.testing.assert_allclose(j.centred, [-0.5, 0.0, 0.5])  # mean over (task - 1.0, pref - 1.0)
    np.testing.assert_allclose(j.margin, [-0.75, -0.25, 0.25])  # mean over (task - 1.5, 0)
    assert j.high.tolist() == [False, False, True] and j.low.tolist() == [True, False, False]


def test_a_saturated_component_blocks_strict_distillation_not_pareto():
    # Task quality 1.0 for 4 of 5 (a policy that meets every request): its 0.8 quantile is 1.0,
    # so nothing is strictly above it; pareto keeps one at 1.0 whose preference is above its quantile.
    batch = [traj(str(k), 0, "c", task=t, pref=p) for k, (t, p) in
             enumerate([(1.0, 0.9), (1.0, 0.2), (1.0, 0.5), (1.0, 0.99), (0.4, 0.5)])]  # fmt: skip
    strict = judge(batch, COMPONENTS, None, q=0.8, rule="strict").high
    pareto = judge(batch, COMPONENTS, None, q=0.8, rule="pareto").high
    # preference 0.8 quantile: 0.9 + 0.2 * (0.99 - 0.9) = 0.918
    assert not strict.any()
    assert pareto.tolist() == [False, False, False, True, False]


def test_classify_ties_count_only_under_pareto():
    r = np.array([[1.0, 0.6], [1.0, 0.5], [0.9, 0.4], [1.0, 0.4]])
    upper, lower = np.array([[1.0, 0.5]] * 4), np.array([[1.0, 0.45]] * 4)
    assert [x.tolist() for x in classify(r, upper, lower, "strict")] == [
        [False] * 4,
        [False, False, True, False],
    ]
    high, low = classify(r, upper, lower, "pareto")
    assert high.tolist() == [True, False, False, False]  # [1.0, 0.5]: all ties, none above
    assert low.tolist() == [False, False, True, True]
