import numpy as np
import pytest

from parpo.evaluation.ope import overlap
from tests.parpo.evaluation.ope.test_estimators import SKEWED


def test_overlap_by_hand():
    d = overlap(SKEWED)  # weights 1.25, 0, 1, 1
    assert d["ess"] == pytest.approx(3.25**2 / 3.5625)
    assert d["ess_share"] == pytest.approx(3.25**2 / 3.5625 / 4)
    assert d["weight_max"] == 1.25
    assert d["weight_q50"] == pytest.approx(1.0)
    assert d["share_never_taken"] == 0.25  # row 1: pi_e never takes action 1 in context 0


def test_ess_equals_n_for_equal_weights():
    from tests.parpo.evaluation.ope.test_estimators import UNIFORM

    fb = UNIFORM.__class__(
        UNIFORM.context,
        UNIFORM.action,
        UNIFORM.position,
        UNIFORM.reward,
        UNIFORM.pscore,
        np.full((4, 2), 0.5),
    )
    assert overlap(fb)["ess"] == pytest.approx(4.0)
