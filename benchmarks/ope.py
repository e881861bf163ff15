"""Off-policy estimation benchmark: speed on 1M simulated rows, accuracy on the Open Bandit data.

Speed (``bench: ope_speed``): 1M simulated logged rows (1,000 contexts, 10 actions, 3
positions; ``parpo.evaluation.ope.simulate``), pi_e precomputed. ``fit_seconds_1m_rows``:
cross-fitting the DM/DR reward model (K = 2 folds). ``seconds_1m_rows``: all point estimates
plus a B = 200 shared bootstrap (``evaluate``'s path, q_hat already fitted). Reference in the
same run: the per-estimator bootstrap (OBP's way: every estimator draws its own index
resamples and gathers its rows), timed on ``--reference-boot`` resamples and scaled to B.

Accuracy (``bench: ope_obd``): the OBD study (``parpo.evaluation.ope.obd.study``) with
B = 500; one line per campaign, direction and estimator with ``estimator``,
``relative_error`` and its interval. The truth has 12-15% relative SE: do not rank on it.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/ope.py --obd ../shared/data/open-bandit-dataset-small
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from parpo.evaluation.ope import ESTIMATORS, EstimatorConfig, bootstrap, cross_fit
from parpo.evaluation.ope.simulate import environment, simulate


def reference_bootstrap(terms, n_boot: int, seed: int) -> None:
    """Per-estimator index resampling: what a loop over estimator objects does."""
    rng = np.random.default_rng(seed)
    for t in terms.values():
        for _ in range(n_boot):
            idx = rng.integers(0, t.num.shape[0], t.num.shape[0])
            _ = t.num[idx].sum() / (idx.shape[0] if t.den is None else t.den[idx].sum())


def speed(rows: int, n_boot: int, repeats: int, reference_boot: int) -> dict:
    env = environment(n_contexts=1000, n_actions=10, n_positions=3)
    fb = simulate(env, rows, seed=0)
    fb = fb.with_q_hat(q := cross_fit(fb, k=2, seed=0))  # warm-up fit, also the q_hat used below
    fits, runs = [], []
    for r in range(repeats):
        t = time.perf_counter()
        cross_fit(fb, k=2, seed=r)
        fits.append(time.perf_counter() - t)
        t = time.perf_counter()
        cfg = EstimatorConfig()
        names = [k for k in ESTIMATORS if k != "replay"]  # simulated logs are not uniform
        terms = {k: ESTIMATORS[k](fb, cfg) for k in names}
        estimates, _ = bootstrap(terms, n_boot=n_boot, seed=r)
        runs.append(time.perf_counter() - t)
    t = time.perf_counter()
    reference_bootstrap(terms, reference_boot, seed=0)
    ref = (time.perf_counter() - t) * n_boot / reference_boot
    ours = statistics.median(runs)
    return {
        "bench": "ope_speed",
        "rows": rows,
        "estimators": names,
        "n_boot": n_boot,
        "seconds_1m_rows": ours * 1e6 / rows,
        "fit_seconds_1m_rows": statistics.median(fits) * 1e6 / rows,
        "reference_seconds_1m_rows": ref * 1e6 / rows,
        "speedup_vs_reference": ref / ours,
        "truth": env.truth,
        "estimates": {k: round(v["estimate"], 5) for k, v in estimates.items()},
        "max_weight": float(fb.weights.max()),
        "q_hat_mae": float(np.abs(q - env.q[fb.context, :, fb.position]).mean()),
        "repeats": repeats,
        "threads": os.environ.get("OMP_NUM_THREADS", "unset"),
    }


def obd(path: Path, n_boot: int) -> list[dict]:
    from data_pipelines.adapters import open_source
    from data_pipelines.ingest import ingest
    from parpo.evaluation.ope.obd import study

    with tempfile.TemporaryDirectory() as tmp:
        ingest(open_source("obd", path), Path(tmp) / "obd")
        rows = study(Path(tmp) / "obd", path / "prior_bts.yaml", n_boot=n_boot)
    return [{"bench": "ope_obd", **r} for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--reference-boot", type=int, default=20)
    ap.add_argument("--obd", type=Path, help="Open Bandit Dataset folder (skipped when absent).")
    ap.add_argument("--obd-boot", type=int, default=500)
    args = ap.parse_args()
    print(json.dumps(speed(args.rows, args.n_boot, args.repeats, args.reference_boot)), flush=True)
    if args.obd is not None and args.obd.exists():
        for row in obd(args.obd, args.obd_boot):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
