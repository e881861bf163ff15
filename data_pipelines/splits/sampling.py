"""Weighted draws without replacement, group-wise and vectorised.

Successive sampling: draw one row with probability proportional to its
weight, remove it, renormalise, repeat ``k`` times. numpy's legacy
``RandomState.choice(replace=False, p=...)`` does this; so do
Efraimidis–Spirakis keys (Efraimidis & Spirakis, "Weighted random sampling
with a reservoir", IPL 2006): give row ``i`` the key ``U_i ** (1 / w_i)``
with ``U_i ~ Uniform(0, 1)`` and keep the ``k`` largest keys. We rank
``log(U_i) / w_i`` instead (same order, no underflow), one group at a time
through a window expression, so there is no Python loop over groups.

Successive sampling is *not* exactly proportional: the probability that row
``i`` is included is not ``k * w_i / sum(w)`` (that can exceed 1), it is
the sum over the draw orders that contain ``i``; heavy rows are included
less often, light rows more often, than proportional sampling would.
For two draws out of three, for example,
``P(i) = p_i + sum_{j != i} p_j * p_i / (1 - p_j)`` with ``p = w / sum(w)``.
"""

from __future__ import annotations

import polars as pl


def es_key(u: pl.Expr, w: pl.Expr) -> pl.Expr:
    """Efraimidis–Spirakis key ``log(u) / w`` (u in (0, 1), w > 0): larger keys are drawn first."""
    return u.log() / w


def draw_mask(u: pl.Expr, w: pl.Expr, k: pl.Expr, by: str | list[str]) -> pl.Expr:
    """Boolean per row: is the row among the ``k`` drawn (successive sampling) in its group?

    ``u``: uniform (0, 1) per row; ``w``: positive weight per row; ``k``: rows to
    draw per group (constant within a group; more than the group holds takes
    them all); ``by``: the group column(s).
    """
    return es_key(u, w).rank("ordinal", descending=True).over(by) <= k


def order_in_group(u: pl.Expr, by: str | list[str]) -> pl.Expr:
    """0-based rank of ``u`` within its group: a uniformly random permutation when ``u`` is uniform."""
    return u.rank("ordinal").over(by).cast(pl.Int64) - 1
