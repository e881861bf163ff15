"""Overlap diagnostics: how far the evaluated policy strays from what was logged."""

from __future__ import annotations

import numpy as np

from parpo.evaluation.ope.feedback import LoggedFeedback

QUANTILES = (0.5, 0.9, 0.99)


def overlap(fb: LoggedFeedback) -> dict[str, float]:
    """Importance-weight summary. ``ess`` = (sum w)^2 / sum w^2 (Kish), the number of rows the
    weighted estimate is worth; ``share_never_taken`` = share of logged rows whose action the
    evaluated policy never takes there (pi_e = 0: those rows only inform DM's model)."""
    w = fb.weights
    sq = float((w**2).sum())
    out = {
        "n": fb.n,
        "ess": float(w.sum() ** 2 / sq) if sq > 0 else 0.0,
        "ess_share": float(w.sum() ** 2 / sq / fb.n) if sq > 0 else 0.0,
        "weight_mean": float(w.mean()),
        "weight_max": float(w.max()),
        "share_never_taken": float((fb.pi_e_logged == 0).mean()),
    }
    for q, v in zip(QUANTILES, np.quantile(w, QUANTILES), strict=True):
        out[f"weight_q{round(q * 100)}"] = float(v)
    return out
