"""Retraining: a warm-started reward model on fresh logs, judged against production on fixed
held-out sets and promoted only when the gate passes (``parpo retrain``; docs/retraining.md).

``job`` runs the steps, ``journal`` keeps their records and the lock, ``heldout`` fixes the
held-out sets, ``gate`` judges, ``history`` reads the chain of versions back.
"""
