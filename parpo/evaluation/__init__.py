"""Offline evaluation of policies: held-out tasks against the reference agents (``policy_eval``);
off-policy estimators and reports come with the offline-evaluation issue."""
