"""Every estimator on a four-row example worked out by hand (values in the comments)."""

import numpy as np
import pytest

from parpo.evaluation.ope import ESTIMATORS, EstimatorConfig, LoggedFeedback

CFG = EstimatorConfig()
PI_E = np.array([[1.0, 0.0], [1.0, 0.0], [0.5, 0.5], [0.5, 0.5]])
Q_HAT = np.array([[0.6, 0.2], [0.6, 0.2], [0.1, 0.5], [0.1, 0.5]])


def feedback(pscore, q_hat=Q_HAT) -> LoggedFeedback:
    # two contexts, two actions; rows: (x0, a0, r1), (x0, a1, r0), (x1, a0, r0), (x1, a1, r1)
    return LoggedFeedback(
        context=np.array([0, 0, 1, 1]),
        action=np.array([0, 1, 0, 1]),
        position=np.zeros(4, dtype=int),
        reward=np.array([1.0, 0.0, 0.0, 1.0]),
        pscore=np.asarray(pscore, dtype=float),
        pi_e=PI_E,
        q_hat=q_hat,
    )


UNIFORM = feedback([0.5, 0.5, 0.5, 0.5])
SKEWED = feedback([0.8, 0.2, 0.5, 0.5])  # weights 1.25, 0, 1, 1


def est(name: str, fb: LoggedFeedback, cfg: EstimatorConfig = CFG) -> float:
    return ESTIMATORS[name](fb, cfg).value


def test_registry_holds_the_seven_estimators():
    assert set(ESTIMATORS) == {"replay", "ips", "snips", "dm", "dr", "switch_dr", "dr_os"}


def test_replay_accepts_in_expectation_and_needs_uniform_logs():
    # pi_e(a_i|x_i) = 1, 0, .5, .5: (1*1 + 0 + 0 + .5*1) / (1 + 0 + .5 + .5)
    assert est("replay", UNIFORM) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="uniform-random"):
        est("replay", SKEWED)


def test_replay_with_a_deterministic_policy_is_the_accepted_rows_mean():
    pi_e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])  # accepts rows 0 and 3
    fb = LoggedFeedback(
        UNIFORM.context, UNIFORM.action, UNIFORM.position, UNIFORM.reward, UNIFORM.pscore, pi_e
    )
    assert est("replay", fb) == pytest.approx((1.0 + 1.0) / 2)


def test_ips_and_clipping():
    assert est("ips", SKEWED) == pytest.approx((1.25 + 0 + 0 + 1) / 4)
    assert est("ips", SKEWED, EstimatorConfig(clip=1.1)) == pytest.approx((1.1 + 1) / 4)


def test_snips():
    assert est("snips", SKEWED) == pytest.approx(2.25 / 3.25)


def test_dm():
    # q_hat(x, pi_e) = .6, .6, .3, .3
    assert est("dm", SKEWED) == pytest.approx(0.45)


def test_dr():
    # .6 + 1.25*.4, .6 + 0, .3 + 1*(-.1), .3 + 1*.5  -> 1.1 + .6 + .2 + .8
    assert est("dr", SKEWED) == pytest.approx(2.7 / 4)


def test_switch_dr_drops_the_correction_above_tau():
    assert est("switch_dr", SKEWED, EstimatorConfig(switch_tau=1.2)) == pytest.approx(2.2 / 4)
    assert est("switch_dr", SKEWED, EstimatorConfig(switch_tau=2.0)) == pytest.approx(est("dr", SKEWED))


def test_dr_os_shrinks_between_dm_and_dr():
    # w_o = 1.25/2.5625, 0, .5, .5
    expected = (0.6 + 0.4 * 1.25 / 2.5625 + 0.6 + 0.3 - 0.05 + 0.3 + 0.25) / 4
    assert est("dr_os", SKEWED, EstimatorConfig(dros_lambda=1.0)) == pytest.approx(expected)
    assert est("dr_os", SKEWED, EstimatorConfig(dros_lambda=0.0)) == pytest.approx(est("dm", SKEWED))
    assert est("dr_os", SKEWED, EstimatorConfig(dros_lambda=1e12)) == pytest.approx(est("dr", SKEWED))


def test_model_based_estimators_need_q_hat():
    with pytest.raises(ValueError, match="q_hat"):
        est("dr", feedback([0.8, 0.2, 0.5, 0.5], q_hat=None))


def test_feedback_rejects_bad_inputs():
    with pytest.raises(ValueError, match="pscore"):
        feedback([0.0, 0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match="pi_e"):
        LoggedFeedback(
            UNIFORM.context, UNIFORM.action, UNIFORM.position, UNIFORM.reward, UNIFORM.pscore, PI_E[:3]
        )
