"""How many held-out rows share a (user, item) pair with another part of a split.

Evaluation masks a user's train items, so a test row whose pair is also in
train can never be hit; split algorithm 2 (pairs) makes these counts zero for
the history protocols (Coat's ``native`` test keeps its own protocol).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import polars as pl

from data_pipelines.splits.prepare import PAIR

#: (held-out part, part it must not share pairs with): the checks of a history split.
HELD_OUT: tuple[tuple[str, str], ...] = (("valid", "train"), ("test", "train"), ("test", "valid"))


def pair_overlap(
    parts: Mapping[str, pl.DataFrame], checks: Iterable[tuple[str, str]] = HELD_OUT
) -> dict[str, int]:
    """For each ``(a, b)`` of ``checks`` with both parts present: ``{a}_rows_in_{b}_pairs``,
    the rows of ``a`` whose (user, item) pair has a row in ``b``, and ``{a}_{b}_pairs``,
    the distinct pairs in both. Anonymous rows (null user) have no pair and never count."""
    out: dict[str, int] = {}
    for a, b in checks:
        if a not in parts or b not in parts:
            continue
        other = parts[b].filter(pl.col("user_id").is_not_null()).select(PAIR).unique()
        shared = parts[a].join(other, on=PAIR, how="semi")
        out[f"{a}_rows_in_{b}_pairs"] = shared.height
        out[f"{a}_{b}_pairs"] = shared.select(PAIR).n_unique() if shared.height else 0
    return out
