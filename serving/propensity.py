"""Monte-Carlo marginal propensity of a served slate.

The policy's plan has several stochastic steps (tool, search strategy and scope, then a
Plackett-Luce slate over whatever the search returned), so the probability that item ``i``
ends at position ``j`` sums over every plan that could lead there: intractable in closed
form, and the pointer's per-step probability is not it. It is estimated from N independent
episodes of the same request under the served temperature, the served episode among them:

    propensity(i, j) = #{samples with item i at position j} / N

The served draw counts, so a served item never gets 0 (a propensity is at least 1/N). Its
expectation given that (i, j) was served is ``1/N + (N - 1)/N * p(i, j)``: the bias is at
most 1/N, which is why N is logged with every decision.

The N episodes come from ``Policy.sample_slates`` (for the native policy one plan tree, the
same distribution as N separate episodes at a fraction of the cost); it also brackets the
first slot's exact probability (``SlateDraws.slot1``/``unexplored``), which the answer
reports next to these counts.
"""

from __future__ import annotations

from collections.abc import Sequence


def position_propensities(samples: Sequence[Sequence[str]], served: Sequence[str]) -> list[float]:
    """For each position j of ``served``: the share of ``samples`` (slates) with ``served[j]`` at j."""
    n = len(samples)
    if n == 0:
        raise ValueError("no samples: the served slate itself must be among them")
    return [sum(1 for s in samples if j < len(s) and s[j] == item) / n for j, item in enumerate(served)]
