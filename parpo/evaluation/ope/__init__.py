"""Off-policy estimation over logged bandit feedback (see docs/evaluation.md).

fb = LoggedFeedback(context, action, position, reward, pscore, pi_e)   # pi_e: [n, A]
evaluate_feedback(fb)   # {"estimates": {"ips": {"estimate", "ci_low", ...}, ...}, "overlap": {...}}
"""

from parpo.evaluation.ope.bootstrap import bootstrap
from parpo.evaluation.ope.diagnostics import overlap
from parpo.evaluation.ope.estimators import ESTIMATORS, EstimatorConfig, Terms, register
from parpo.evaluation.ope.evaluate import evaluate_feedback
from parpo.evaluation.ope.feedback import LoggedFeedback
from parpo.evaluation.ope.reward_model import cross_fit

__all__ = [
    "ESTIMATORS",
    "EstimatorConfig",
    "LoggedFeedback",
    "Terms",
    "bootstrap",
    "cross_fit",
    "evaluate_feedback",
    "overlap",
    "register",
]
