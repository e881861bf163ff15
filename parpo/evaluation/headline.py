"""What an evaluation shows first. Where the truth is known (synthetic worlds), true preference
leads and the ``oracle_true`` agent bounds it; hit@10 and NDCG follow the logging policy's
exposure there (the held-out positives are what it showed), so they come after, labelled.
Printing order only: the eval JSON keys do not change."""

from __future__ import annotations

from typing import Any

#: Metrics in the order every table prints them.
ORDER: tuple[str, ...] = ("true_preference", "hit@10", "ndcg@10", "task_quality", "preference")
#: The label under a table that has true preference.
EXPOSURE_NOTE = "hit@10/ndcg@10 follow the logging policy's exposure on data with a known truth"


def ordered(metrics: dict[str, Any]) -> list[str]:
    """The keys of ``metrics`` in ``ORDER``, then any others in their order."""
    return [k for k in ORDER if k in metrics] + [k for k in metrics if k not in ORDER]


def oracle_share(part: dict[str, Any]) -> float | None:
    """The policy's share of ``oracle_true``'s true-preference margin over popularity:
    ``(policy - popularity) / (oracle_true - popularity)`` of one part of an eval record;
    None without the truth or a margin."""
    base = part.get("baselines", {})
    if "oracle_true" not in base or "true_preference" not in part.get("policy", {}):
        return None
    pop = base["popularity"]["true_preference"]
    margin = base["oracle_true"]["true_preference"] - pop
    return (part["policy"]["true_preference"] - pop) / margin if margin > 0 else None
