"""The OBD study on the real logs: the wiring and what must hold exactly (no ranking of
estimators: the on-policy truth itself has 12-15% relative standard error)."""

import numpy as np
import pytest

from parpo.evaluation.ope.obd import bts_action_dist, study

pytestmark = [pytest.mark.realdata, pytest.mark.integration]


def test_bts_distribution_is_a_slate_of_three_distinct_items(obd):
    dist = bts_action_dist(obd[1], "men", 34, n_sim=20_000)
    assert dist.shape == (3, 34)
    assert np.allclose(dist.sum(axis=1), 1.0)  # one item per position
    assert (dist.sum(axis=0) <= 1.0 + 1e-12).all()  # an item fills at most one position


def test_study_rows(obd):
    rows = study(*obd, n_boot=100)
    by = {(r["campaign"], r["evaluated"], r["estimator"]): r for r in rows}
    assert len(rows) == 2 * (7 + 6)  # replay only where the logs are uniform-random
    # the on-policy truth is the other log's click rate (OBD README: 0.0069 men bts, else 0.0046)
    assert by["men", "obd-bts", "ips"]["truth"] == pytest.approx(0.0069)
    assert by["women", "obd-bts", "ips"]["truth"] == pytest.approx(0.0046)
    assert by["men", "uniform", "ips"]["truth"] == pytest.approx(0.0046)
    for campaign in ("men", "women"):
        # on uniform logs w is proportional to pi_e, so replay and SNIPS are the same ratio
        replay, snips = by[campaign, "obd-bts", "replay"], by[campaign, "obd-bts", "snips"]
        assert replay["estimate"] == pytest.approx(snips["estimate"])
        assert replay["n_logs"] == 10_000
    for r in rows:
        assert np.isfinite([r["estimate"], r["ci_low"], r["ci_high"], r["relative_error"]]).all()
        assert r["truth_ci_low"] < r["truth"] < r["truth_ci_high"]


def test_bts_columns_follow_the_item_ids(obd):
    from parpo.evaluation.ope.logs import read_logs
    from parpo.evaluation.ope.obd import CONTEXT, policy_dist

    logs = read_logs(obd[0], "uniform_random", "men", CONTEXT)
    assert logs.items[:3] == ["men:0", "men:1", "men:10"]  # string order, not the prior's
    dist = policy_dist("obd-bts", logs, "men", obd[1])
    prior = bts_action_dist(obd[1], "men", 34)
    assert np.array_equal(dist[:, 2], prior[:, 10])
