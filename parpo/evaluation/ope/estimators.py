"""Off-policy estimators over logged bandit feedback, one small function each, in a registry.

Every estimator is a ratio of row sums, V = sum_i num_i / sum_i den_i (den_i = 1 for the
plain means). Each function returns those per-row ``Terms``; ``Terms.value`` is the point
estimate, and the shared bootstrap (``bootstrap.py``) re-sums the same terms under every
resample instead of recomputing each estimator. Formulas follow the Open Bandit Pipeline
(Saito et al., 2021); q_hat is held fixed (cross-fitted once) across resamples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from parpo.evaluation.ope.feedback import LoggedFeedback
from parpo_core.config import StrictModel
from parpo_core.names import NameRegistry


class EstimatorConfig(StrictModel):
    """Hyperparameters; defaults are fixed a priori, not tuned on any evaluation data."""

    clip: float | None = Field(None, gt=0, description="IPS: cap on the importance weight (None: unclipped).")
    switch_tau: float = Field(10.0, ge=0, description="SwitchDR: rows with w > tau keep only the DM term.")
    dros_lambda: float = Field(10.0, ge=0, description="DRos: shrinkage w -> lambda w / (w^2 + lambda).")


@dataclass(frozen=True)
class Terms:
    """Per-row numerator [n] and denominator [n] (None: all ones) of a ratio-of-sums estimate."""

    num: np.ndarray
    den: np.ndarray | None = None

    @property
    def value(self) -> float:
        n = self.num.shape[0] if self.den is None else self.den.sum()
        return float(self.num.sum() / n) if n else float("nan")


EstimatorFn = Callable[[LoggedFeedback, EstimatorConfig], Terms]
ESTIMATORS: NameRegistry[EstimatorFn] = NameRegistry("estimator")
NEEDS_REWARD_MODEL = {"dm", "dr", "switch_dr", "dr_os"}


register = ESTIMATORS.register


def _q(fb: LoggedFeedback) -> tuple[np.ndarray, np.ndarray]:
    """(q_hat(x_i, pi_e) [n], q_hat(x_i, a_i) [n]) for the model-based estimators."""
    if fb.q_hat is None:
        raise ValueError("this estimator needs out-of-fold q_hat (reward_model.cross_fit) on the feedback")
    return (fb.q_hat * fb.pi_e).sum(axis=1), fb.q_hat[np.arange(fb.n), fb.action]


@register("replay")
def replay(fb: LoggedFeedback, cfg: EstimatorConfig) -> Terms:
    """Li et al. (2011) replay for uniform-random logs: keep the rows where the evaluated policy
    would have taken the logged action. For a stochastic pi_e the acceptance is taken in
    expectation, V = sum pi_e(a_i|x_i) r_i / sum pi_e(a_i|x_i); deterministic pi_e gives the
    classic accept/reject average. Only valid when the logging policy was uniform."""
    if not fb.uniform_logs:
        raise ValueError("replay needs uniform-random logs (one propensity); use ips/snips/dr for these logs")
    p = fb.pi_e_logged
    return Terms(p * fb.reward, p)


@register("ips")
def ips(fb: LoggedFeedback, cfg: EstimatorConfig) -> Terms:
    """Inverse propensity scoring, V = mean(min(w_i, clip) r_i) (unbiased when unclipped)."""
    w = fb.weights if cfg.clip is None else np.minimum(fb.weights, cfg.clip)
    return Terms(w * fb.reward)


@register("snips")
def snips(fb: LoggedFeedback, cfg: EstimatorConfig) -> Terms:
    """Self-normalised IPS, V = sum w_i r_i / sum w_i (Swaminathan & Joachims, 2015)."""
    w = fb.weights
    return Terms(w * fb.reward, w)


@register("dm")
def dm(fb: LoggedFeedback, cfg: EstimatorConfig) -> Terms:
    """Direct method, V = mean_i sum_a pi_e(a|x_i) q_hat(x_i, a)."""
    return Terms(_q(fb)[0])


def _dr_terms(fb: LoggedFeedback, w: np.ndarray) -> Terms:
    q_pi, q_logged = _q(fb)
    return Terms(q_pi + w * (fb.reward - q_logged))


@register("dr")
def dr(fb: LoggedFeedback, cfg: EstimatorConfig) -> Terms:
    """Doubly robust (Dudik et al., 2014), V = mean(q_hat(x_i, pi_e) + w_i (r_i - q_hat(x_i, a_i)))."""
    return _dr_terms(fb, fb.weights)


@register("switch_dr")
def switch_dr(fb: LoggedFeedback, cfg: EstimatorConfig) -> Terms:
    """SwitchDR (Wang et al., 2017, as in OBP): the DR correction only where w_i <= tau."""
    w = fb.weights
    return _dr_terms(fb, np.where(w <= cfg.switch_tau, w, 0.0))


@register("dr_os")
def dr_os(fb: LoggedFeedback, cfg: EstimatorConfig) -> Terms:
    """DR with optimistic shrinkage (Su et al., 2020): w -> lambda w / (w^2 + lambda);
    lambda = 0 is DM, lambda -> inf is DR."""
    w = fb.weights
    shrunk = w * cfg.dros_lambda / (w**2 + cfg.dros_lambda) if cfg.dros_lambda > 0 else np.zeros_like(w)
    return _dr_terms(fb, shrunk)
