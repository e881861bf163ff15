"""One off-policy evaluation: cross-fit the reward model, every estimator's point estimate,
shared-bootstrap intervals and overlap diagnostics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from parpo.evaluation.ope.bootstrap import bootstrap
from parpo.evaluation.ope.diagnostics import overlap
from parpo.evaluation.ope.estimators import ESTIMATORS, NEEDS_REWARD_MODEL, EstimatorConfig
from parpo.evaluation.ope.feedback import LoggedFeedback
from parpo.evaluation.ope.reward_model import cross_fit


def evaluate_feedback(
    fb: LoggedFeedback,
    estimators: Sequence[str] | None = None,
    cfg: EstimatorConfig | None = None,
    *,
    n_boot: int = 500,
    folds: int = 2,
    seed: int = 0,
    clusters: np.ndarray | None = None,
) -> dict[str, Any]:
    """``{"estimates": {name: {estimate, ci_low, ci_high, se, n_boot}}, "overlap": {...},
    "resamples": {name: [n_boot] array}}``. With ``estimators`` None every registered estimator
    runs, ``replay`` only on uniform-random logs. ``clusters`` [n]: resample these (e.g. the
    slates) in the bootstrap instead of rows."""
    cfg = cfg or EstimatorConfig()
    names = list(estimators or ESTIMATORS)
    for k in names:
        ESTIMATORS[k]  # an unknown name is one UserError line naming the closest one
    if NEEDS_REWARD_MODEL & set(names) and fb.q_hat is None:
        fb = fb.with_q_hat(cross_fit(fb, k=folds, seed=seed))
    if not fb.uniform_logs and estimators is None:
        names.remove("replay")
    terms = {k: ESTIMATORS[k](fb, cfg) for k in names}
    estimates, resamples = bootstrap(terms, n_boot=n_boot, seed=seed, clusters=clusters)
    return {"estimates": estimates, "overlap": overlap(fb), "resamples": resamples}
