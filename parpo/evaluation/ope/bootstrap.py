"""Bootstrap intervals for several estimators from one set of row resamples.

Each resample b draws n rows with replacement; as counts c_b [n], every estimator's value is
(c_b . num) / (c_b . den), so all estimators see the same resamples and one matrix product
per chunk of resamples evaluates them all. With ``clusters`` (e.g. the slate a row was shown
in), whole clusters are drawn instead and each row takes its cluster's count: rows of one
slate share a user and a draw, so resampling them apart would make the intervals too narrow. The reward model is not refitted per resample
(its fitting variance is not in the interval); intervals are percentile intervals.
"""

from __future__ import annotations

import numpy as np

from parpo.evaluation.ope.estimators import Terms

CHUNK = 8  # resamples per matrix product: 8 x n float64 counts (64 MB at n = 1M)


def _resample(
    terms: dict[str, Terms], n_boot: int, seed: int, clusters: np.ndarray | None = None
) -> tuple[list[str], np.ndarray]:
    """(names, values [n_boot, len(names)]): every estimator on the same ``n_boot`` resamples."""
    names = list(terms)
    n = next(iter(terms.values())).num.shape[0]
    ones = np.ones(n)
    # [2m, n]: numerators then denominators; row-major so the product below streams the counts
    table = np.stack(
        [terms[k].num for k in names] + [ones if terms[k].den is None else terms[k].den for k in names]
    )
    rng = np.random.default_rng(seed)
    sums = np.empty((n_boot, table.shape[0]))
    counts = np.empty((min(CHUNK, n_boot), n))
    n_draw = n if clusters is None else int(clusters.max()) + 1
    for start in range(0, n_boot, CHUNK):
        b = min(CHUNK, n_boot - start)
        for i in range(b):  # one resample's counts fit in cache; a bincount over all b is slower
            drawn = np.bincount(rng.integers(0, n_draw, size=n_draw), minlength=n_draw)
            counts[i] = drawn if clusters is None else drawn[clusters]
        sums[start : start + b] = (table @ counts[:b].T).T
    m = len(names)
    with np.errstate(invalid="ignore", divide="ignore"):
        return names, sums[:, :m] / sums[:, m:]


def bootstrap(
    terms: dict[str, Terms],
    n_boot: int = 500,
    alpha: float = 0.05,
    seed: int = 0,
    clusters: np.ndarray | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, np.ndarray]]:
    """Per estimator: ``estimate``, ``ci_low``, ``ci_high`` (percentile, level 1 - alpha), ``se``
    (bootstrap standard deviation) and ``n_boot``, all from the same ``n_boot`` resamples; and
    the resampled values themselves ([n_boot] per estimator, for derived intervals).
    ``clusters``: [n] dense ids 0..C-1; resample them, not rows (None: rows).
    Resamples where a ratio estimator's denominator is 0 (e.g. replay accepting no row) are
    dropped from that estimator's interval."""
    names, values = _resample(terms, n_boot, seed, clusters)
    out = {}
    for j, name in enumerate(names):
        v = values[:, j][np.isfinite(values[:, j])]
        lo, hi = np.quantile(v, [alpha / 2, 1 - alpha / 2]) if v.size else (np.nan, np.nan)
        out[name] = {
            "estimate": terms[name].value,
            "ci_low": float(lo),
            "ci_high": float(hi),
            "se": float(v.std(ddof=1)) if v.size > 1 else float("nan"),
            "n_boot": n_boot,
        }
    return out, {name: values[:, j] for j, name in enumerate(names)}
