"""Unbiasedness and interval coverage on simulated logs with a known truth (fixed seeds).

500 independent logs of 5,000 rows (weights at most 20): unclipped IPS and DR must average
within 3 standard errors of the truth, and their 95% bootstrap intervals must cover it in
95 +- 3% of the logs.
"""

import numpy as np
import pytest

from parpo.evaluation.ope import evaluate_feedback
from parpo.evaluation.ope.simulate import environment, simulate

REPS, N, N_BOOT = 500, 5_000, 200


@pytest.mark.integration
def test_ips_and_dr_are_unbiased_and_cover():
    env = environment(n_contexts=20, n_actions=10, n_positions=3)
    estimates, covered = {"ips": [], "dr": []}, {"ips": 0, "dr": 0}
    for rep in range(REPS):
        fb = simulate(env, N, seed=1000 + rep)
        assert fb.weights.max() <= 20
        out = evaluate_feedback(fb, ["ips", "dr"], n_boot=N_BOOT, seed=rep)["estimates"]
        for k in estimates:
            estimates[k].append(out[k]["estimate"])
            covered[k] += out[k]["ci_low"] <= env.truth <= out[k]["ci_high"]
    for k, values in estimates.items():
        v = np.asarray(values)
        se = v.std(ddof=1) / np.sqrt(REPS)
        assert abs(v.mean() - env.truth) < 3 * se, (k, v.mean(), env.truth, se)
        assert 0.92 <= covered[k] / REPS <= 0.98, (k, covered[k] / REPS)
