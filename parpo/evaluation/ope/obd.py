"""The Open Bandit Dataset study: the two logged policies evaluated from each other's logs.

ZOZOTOWN ran uniform-random and Bernoulli Thompson sampling (BTS) side by side on 3-slot
slates. The BTS policy's per-position action distribution is recomputed from its Beta prior
(``prior_bts.yaml``) by Monte Carlo, as OBP does: draw theta_a ~ Beta(alpha_a, beta_a), show
the top 3 by theta, position = rank. Each policy is then estimated off-policy from the other
policy's logs and compared with its own on-policy click rate (the "truth", itself noisy: about
12-15% relative standard error at 10k rows, so estimators are not ranked on it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from parpo.evaluation.ope.bootstrap import bootstrap
from parpo.evaluation.ope.estimators import Terms
from parpo.evaluation.ope.evaluate import evaluate_feedback
from parpo.evaluation.ope.logs import Logs, read_logs

CAMPAIGNS = ("men", "women")
LOGGING = {"uniform": "uniform_random", "obd-bts": "obd_bts"}
CONTEXT = tuple(f"user_feature_{i}" for i in range(4))
SLOTS = 3


def bts_action_dist(
    prior: Path, campaign: str, n_items: int, n_sim: int = 100_000, seed: int = 0
) -> np.ndarray:
    """[3, n_items]: P(BTS shows item a at position p), Monte Carlo over ``n_sim`` Beta draws."""
    import yaml

    params = yaml.safe_load(Path(prior).read_text())[campaign]
    alpha, beta = np.asarray(params["alpha"], float), np.asarray(params["beta"], float)
    if alpha.shape != (n_items,):
        raise ValueError(f"{prior}: {campaign} prior has {alpha.shape[0]} items, the logs {n_items}")
    rng = np.random.default_rng(seed)
    dist = np.zeros((SLOTS, n_items))
    for start in range(0, n_sim, 10_000):  # chunks keep the draws at 10k x A
        theta = rng.beta(alpha, beta, size=(min(10_000, n_sim - start), n_items))
        top = np.argsort(-theta, axis=1)[:, :SLOTS]
        for p in range(SLOTS):
            dist[p] += np.bincount(top[:, p], minlength=n_items)
    return dist / n_sim


def item_numbers(logs: Logs) -> np.ndarray:
    """OBD item ids are ``<campaign>:<k>``; the prior lists items by k."""
    return np.array([int(i.rsplit(":", 1)[1]) for i in logs.items])


def policy_dist(policy: str, logs: Logs, campaign: str, prior: Path | None) -> np.ndarray:
    """[3, A] per-position distribution of ``uniform`` or ``obd-bts`` over ``logs.items``."""
    n_items = len(logs.items)
    if policy == "uniform":
        return np.full((SLOTS, n_items), 1.0 / n_items)
    if prior is None:
        raise ValueError("obd-bts needs the Thompson-sampling prior (prior_bts.yaml)")
    return bts_action_dist(prior, campaign, n_items)[:, item_numbers(logs)]


def campaigns(root: str | Path, evaluated: str) -> list[str]:
    """The campaigns on which ``evaluated`` (``uniform`` or ``obd-bts``) can be estimated: the
    other policy logged impressions with propensities there (the estimate's data) and
    ``evaluated`` did too (its on-policy truth). None is one ``DataError`` line that names the
    ``--policy`` asked for and what the logs lack."""
    import polars as pl

    from data_pipelines.dataset import Dataset
    from parpo_core.errors import DataError

    ds = Dataset(root)
    logged = "uniform" if evaluated == "obd-bts" else "obd-bts"
    found = (
        ds.interactions()
        .filter(
            (pl.col("event") == "impression")
            & pl.col("propensity").is_not_null()
            & pl.col("position").is_not_null()
        )
        .select("logging_policy", "item_id")
        .unique()
        .collect()
        .join(ds.items().select("item_id", "category"), on="item_id", how="left")
        .select("logging_policy", "category")
        .unique()
    )
    pairs = set(found.iter_rows())
    by = {name: [c for c in CAMPAIGNS if (LOGGING[name], c) in pairs] for name in (logged, evaluated)}
    both = [c for c in by[logged] if c in by[evaluated]]
    if both:
        return both
    if not by[logged]:
        here = sorted({p for p, _ in pairs if p})
        raise DataError(
            f"{ds.root}: --policy {evaluated} is estimated from Open Bandit Dataset impressions logged "
            f"by {logged} (logging_policy {LOGGING[logged]!r}) with propensities, and these logs have none "
            f"(logging policies with propensities here: {', '.join(map(repr, here)) or 'none'}); ingest "
            "the Open Bandit Dataset with --source obd, or evaluate a registry version (--registry) on "
            "server logs"
        )
    raise DataError(
        f"{ds.root}: --policy {evaluated} is compared with its own click rate, and these logs have no "
        f"impressions logged by {evaluated} (logging_policy {LOGGING[evaluated]!r}) on the campaigns "
        f"{logged} logged ({', '.join(by[logged])}); ingest both policy folders of the Open Bandit Dataset"
    )


def evaluate_obd(
    root: str | Path, evaluated: str, campaign: str, prior: Path | None, *, n_boot: int = 500, seed: int = 0
) -> dict[str, Any]:
    """``evaluated`` (``uniform`` or ``obd-bts``) estimated from the other policy's logs of
    ``campaign``, next to its on-policy click rate. Returns ``{"rows": [one per estimator],
    "overlap": {...}}``; each row has the estimate and interval, the truth and interval, and
    the relative error |estimate - truth| / truth with the percentile interval of its resamples
    (the truth's resamples are paired with the estimate's: independent logs, so any pairing is
    valid)."""
    logged = "uniform" if evaluated == "obd-bts" else "obd-bts"
    logs = read_logs(root, LOGGING[logged], campaign, CONTEXT)
    on_policy = read_logs(root, LOGGING[evaluated], campaign)
    fb = logs.feedback(policy_dist(evaluated, logs, campaign, prior))
    result = evaluate_feedback(fb, n_boot=n_boot, seed=seed)
    summary, resamples = bootstrap({"truth": Terms(on_policy.reward)}, n_boot, seed=seed + 1)
    truth, truth_b = summary["truth"], resamples["truth"]
    rows = []
    for name, est in result["estimates"].items():
        rel_b = np.abs(result["resamples"][name] - truth_b) / truth_b
        lo, hi = np.nanquantile(rel_b, [0.025, 0.975])
        rows.append(
            {
                "campaign": campaign,
                "evaluated": evaluated,
                "logs": logged,
                "n_logs": fb.n,
                "estimator": name,
                "estimate": est["estimate"],
                "ci_low": est["ci_low"],
                "ci_high": est["ci_high"],
                "truth": truth["estimate"],
                "truth_ci_low": truth["ci_low"],
                "truth_ci_high": truth["ci_high"],
                "n_truth": on_policy.reward.shape[0],
                "relative_error": abs(est["estimate"] - truth["estimate"]) / truth["estimate"],
                "relative_error_ci_low": float(lo),
                "relative_error_ci_high": float(hi),
                "n_boot": n_boot,
            }
        )
    return {"rows": rows, "overlap": result["overlap"]}


def study(root: str | Path, prior: Path, *, n_boot: int = 500, seed: int = 0) -> list[dict[str, Any]]:
    """Both directions on both campaigns: one row per campaign, direction and estimator."""
    return [
        row
        for campaign in CAMPAIGNS
        for evaluated in ("obd-bts", "uniform")
        for row in evaluate_obd(root, evaluated, campaign, prior, n_boot=n_boot, seed=seed)["rows"]
    ]
