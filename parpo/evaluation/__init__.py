"""Offline evaluation of policies: held-out tasks against the reference agents (``policy_eval``)
and off-policy estimators over logged bandit feedback with bootstrap intervals and overlap
diagnostics (``ope/``, docs/evaluation.md). Policy comparison and reports come later."""
