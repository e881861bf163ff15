"""Reward-model cost at scale: one whole ``parpo reward train`` run of a preset on a dataset.

Times what ``parpo reward train`` does before publishing, in this process: load the split,
attach impressions and features, stage 1 (when the preset has it), stage 2 to early stop
(with its evaluations, timed apart), the full evaluation. One JSON line per dataset: seconds
per phase, training triples, seconds per 1M training triples (wall and process CPU), peak RSS (``ru_maxrss``), the load average
before and after. Overrides go before the options.

    python benchmarks/reward_scale.py --data /tmp/big                     # the dice preset
    python benchmarks/reward_scale.py train.max_steps=400 --data /tmp/big --preset mf
    python benchmarks/reward_scale.py train.max_steps=300 --no-full-eval --data /tmp/w5m /tmp/w1m
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def one(data_dir: Path, preset: str, extra: list[str], full_eval: bool = True) -> dict[str, Any]:
    from reward_quality import VARIANTS

    from data_pipelines.dataset import Dataset
    from parpo.presets import load
    from reward_models.config import RewardConfig
    from reward_models.pipeline import evaluate_weights, load_training_data, train_weights

    base, variant = VARIANTS.get(preset, (preset, []))
    over = ["train.progress_bar=false", "train.checkpoint=false", *variant, *extra]
    cfg = load(RewardConfig, "reward", base, over)
    load_start = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    ds = Dataset(data_dir)
    data = load_training_data(cfg, ds)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="reward-scale-") as run:
        res, weights, stage1 = train_weights(cfg, ds, data, Path(run))
    t2 = time.perf_counter()
    m = evaluate_weights(cfg, weights, data, stage1) if full_eval else {}
    t3, c3 = time.perf_counter(), time.process_time()
    per_m = 1e6 / max(res.triples, 1)
    return {
        "bench": "reward_scale",
        "data": data_dir.name,
        "model": preset,
        "users": data.n_users,
        "items": data.n_items,
        "train_positives": data.n_train,
        "train_impressions": data.exposure.n_train if data.exposure is not None else 0,
        "batch_size": cfg.train.batch_for(data.n_train),
        "run_seconds": round(t3 - t0, 2),
        "run_cpu_seconds": round(c3 - c0, 2),
        "load_seconds": round(t1 - t0, 2),
        "fit_seconds": round(t2 - t1, 2),  # stage 1 + stage 2 with its evaluations
        "valid_seconds": round(res.valid_seconds, 2),  # the evaluations during stage 2
        "evaluations": res.evaluations,
        "eval_seconds": round(t3 - t2, 2) if full_eval else None,
        "train_seconds": round(res.train_seconds, 2),
        "triples": res.triples,
        "steps": res.steps,
        "epochs": res.epochs,
        "seconds_per_1m_triples": round(res.train_seconds * per_m, 3),
        "cpu_seconds_per_1m_triples": round(res.train_cpu_seconds * per_m, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "selection": res.selection.target,
        "test_ndcg@10": m.get("test", {}).get("ndcg@10"),
        "interest_spearman": m.get("synthetic", {}).get("interest_spearman"),
        "loadavg_1m": [round(load_start, 2), round(os.getloadavg()[0], 2)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, nargs="+", required=True, help="ingested dataset folders")
    ap.add_argument("--preset", default="dice")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--no-full-eval",
        action="store_true",
        help="skip the full evaluation (training cost only: a big catalogue's takes longest)",
    )
    ap.add_argument("overrides", nargs="*", help="dotted overrides for every run")
    args = ap.parse_args()
    extra = [*args.overrides, f"runtime.threads={args.threads}"]
    for d in args.data:
        print(json.dumps(one(d, args.preset, extra, not args.no_full_eval)), flush=True)


if __name__ == "__main__":
    main()
