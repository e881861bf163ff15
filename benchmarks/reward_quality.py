"""Reward-model quality: DICE vs MF-BPR (and optionally LightGCN), paired per split seed x training seed.

One JSON line per run on stdout, then one summary line per preset (mean ± std over runs)
and one paired-difference line per preset against the baseline. Progress goes to stderr.

    python benchmarks/reward_quality.py --data /tmp/ml                        # an ingested ML-100K
    python benchmarks/reward_quality.py --movielens ../shared/data/movielens-100k
    python benchmarks/reward_quality.py --data data/synth --presets dice mf --split-seeds 0 --seeds 0 1 2
    python benchmarks/reward_quality.py train.epochs=200 train.early_stopping=false --data /tmp/ml \
        --loss-epochs 50 100 150 200      # overrides go before the options (nargs)

Checkpoints are chosen on the preset's selection target (``train.select``; ``dice``: held-out
impression log-loss where the data has impressions, else the uniform half, else valid NDCG@10;
``mf``, ``lightgcn``: valid NDCG@10); the split seeds are fixed by the command line, before
anything is trained. ``dice_v1`` is the ``dice`` preset as it was before hybrid features,
impression negatives and the new selection (each switched off), ``dice_v2`` as it was before
scalar conformity, the pointwise exposure loss and uniform-half-first selection: for pairing.
``--pipeline`` trains as ``parpo reward train`` does (stage 1 first when the preset enables it,
its profiles initialising stage 2's users); without it, stage 2 alone (``fit``).
``report_half.ndcg@10`` is the click ranking on the report half of a uniform-exposure set
(synthetic ``uniform_test``, Coat's random test), MostPop's on the same users beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KEYS = (
    "test.ndcg@10",
    "test.recall@10",
    "valid.ndcg@10",
    "synthetic.interest_spearman",
    "synthetic.uniform.ndcg@10",
    "report_half.ndcg@10",
    "mostpop.report_half.ndcg@10",
    "test.ndcg@5",
    "report_half.ndcg@5",
    "mostpop.report_half.ndcg@5",
)
# Presets that are another preset with overrides (appended before the command line's).
VARIANTS = {
    "dice_v1": (
        "dice",
        [
            "exposure.enabled=false",
            "exposure.pointwise=0",
            "model.features.item=false",
            "model.features.user=false",
            "model.conformity=embedding",
            "train.batch_size=8192",
            "train.select=ndcg",
            "train.eval_every_steps=0",
            "eval.valid_users=0",
        ],
    ),
    # the dice preset before scalar conformity, the pointwise exposure loss, 1024-triple batches
    # and the uniform half first in selection
    "dice_v2": (
        "dice",
        [
            "model.conformity=embedding",
            "exposure.pointwise=0",
            "train.batch_size=8192",
            "train.select=auto",
        ],
    ),
    # candidate (on the v2 preset): conformity explained by popularity only, no cause-term decay, L2 on the id rows
    "dice_pop": (
        "dice",
        [
            "model.conformity=popularity",
            "exposure.pointwise=0",
            "train.batch_size=8192",
            "train.select=auto",
            "sampler.loss_decay=1",
            "train.reg=1.0",
            "model.dim=128",
        ],
    ),
}


def epoch_losses(metrics_csv: Path | None, epochs: list[int]) -> dict[str, Any]:
    """``train/loss`` at the given 1-based epochs from the run's ``logs/metrics.csv``, and whether
    any logged loss was not finite (the stability check: no NaN without early stopping)."""
    import polars as pl

    if metrics_csv is None or not epochs:
        return {}
    log = pl.read_csv(metrics_csv).filter(pl.col("train/loss").is_not_null()).sort("epoch")
    loss = dict(zip((log["epoch"] + 1).to_list(), log["train/loss"].to_list(), strict=True))
    return {
        "loss_at_epoch": {str(e): round(loss[e], 6) for e in epochs if e in loss},
        "loss_all_finite": all(math.isfinite(v) for v in loss.values()),
    }


def one_run(
    data_dir: Path,
    preset: str,
    split: str,
    split_seed: int,
    seed: int,
    extra: list[str],
    loss_epochs: list[int] | None = None,
    pipeline: bool = False,
) -> dict[str, Any]:
    from data_pipelines.dataset import Dataset
    from parpo.presets import load
    from reward_models.config import RewardConfig
    from reward_models.data import RewardData
    from reward_models.evaluate import evaluate
    from reward_models.pipeline import attach_side_inputs, export_weights, readout_vectors, train_weights
    from reward_models.selection import load_uniform_half
    from reward_models.training import fit

    base, variant = VARIANTS.get(preset, (preset, []))

    over = [
        f"split.name={split}",
        f"split.seed={split_seed}",
        f"runtime.seed={seed}",
        "train.progress_bar=false",
        "train.checkpoint=false",
        *variant,
        *extra,
    ]
    cfg = load(RewardConfig, "reward", base, over)
    t0 = time.perf_counter()
    ds = Dataset(data_dir)
    data = RewardData.load(ds, split, split_seed, cfg.split.positives, cfg.split.algorithm)
    attach_side_inputs(cfg, ds, data)
    with tempfile.TemporaryDirectory(prefix="reward-quality-") as run:
        if pipeline:  # stage 1 (when the preset has it) + stage 2, as ``parpo reward train`` runs them
            res, weights, stage1 = train_weights(cfg, ds, data, Path(run))
        else:
            res, stage1 = fit(cfg, data, run), {}
            weights = export_weights(res.tables, data)
        losses = epoch_losses(res.logs, loss_epochs or [])
    vec = readout_vectors(weights, data, {"stage1": stage1} if stage1 else None)
    half = load_uniform_half(data)
    m = evaluate(vec, data, cfg.eval.ks, baselines=False, half=half)
    seconds = time.perf_counter() - t0
    flat = {
        f"{sec}.{k}": v
        for sec in ("valid", "test", "synthetic", "diagnostics", "report_half")
        for k, v in m.get(sec, {}).items()
        if isinstance(v, float | int)
    }
    if half is not None:  # MostPop on the same report half (no training: a reference line per run)
        from reward_models.evaluate import mostpop_pairs, report_half_metrics

        pop = report_half_metrics(mostpop_pairs(data.popularity), data, half)
        flat |= {f"mostpop.report_half.{k}": pop[k] for k in ("ndcg@5", "ndcg@10")}
    return {
        "bench": "reward_quality",
        "data": data_dir.name,
        "model": preset,
        "split": split,
        "split_seed": split_seed,
        "split_algorithm": data.algorithm,
        "seed": seed,
        **{k: round(v, 5) for k, v in flat.items() if k in KEYS or k.startswith("diagnostics.")},
        **res.summary(),
        **losses,
        "run_seconds": round(seconds, 2),
    }


def summarise(rows: list[dict[str, Any]], baseline: str) -> list[dict[str, Any]]:
    out = []
    presets = sorted({r["model"] for r in rows})
    for p in presets:
        mine = [r for r in rows if r["model"] == p]
        line: dict[str, Any] = {"bench": "reward_quality_summary", "model": p, "runs": len(mine)}
        for k in KEYS:
            vals = [r[k] for r in mine if k in r]
            if vals:
                line[k] = round(statistics.mean(vals), 5)
                line[f"{k}.std"] = round(statistics.stdev(vals), 5) if len(vals) > 1 else 0.0
        out.append(line)
        if p == baseline:
            continue
        base = {(r["split_seed"], r["seed"]): r for r in rows if r["model"] == baseline}
        diff: dict[str, Any] = {"bench": "reward_quality_paired", "model": p, "baseline": baseline}
        for k in KEYS:
            d = [
                r[k] - base[(r["split_seed"], r["seed"])][k]
                for r in mine
                if k in r and (r["split_seed"], r["seed"]) in base
            ]
            if d:
                diff[f"{k}.diff"] = round(statistics.mean(d), 5)
                diff[f"{k}.diff_std"] = round(statistics.stdev(d), 5) if len(d) > 1 else 0.0
                diff["pairs"] = len(d)
        out.append(diff)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", type=Path, help="an ingested dataset folder")
    src.add_argument("--movielens", type=Path, help="the raw ML-100K folder (ingested into a temp folder)")
    ap.add_argument("--split", default="intervened")
    ap.add_argument("--split-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--presets", nargs="+", default=["dice", "mf"])
    ap.add_argument("--baseline", default="mf")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--pipeline",
        action="store_true",
        help="train as `parpo reward train` does: stage 1 too when the preset enables it (else stage 2 only)",
    )
    ap.add_argument(
        "--loss-epochs", type=int, nargs="*", default=[], help="report train/loss at these epochs (1-based)"
    )
    ap.add_argument(
        "overrides", nargs="*", help="extra dotted overrides for every run, e.g. train.epochs=200"
    )
    args = ap.parse_args()
    extra = list(args.overrides) + ([f"runtime.threads={args.threads}"] if args.threads else [])
    tmp = None
    data_dir = args.data
    if args.movielens is not None:
        from data_pipelines.adapters import open_source
        from data_pipelines.ingest import ingest

        tmp = tempfile.TemporaryDirectory(prefix="reward-quality-ml-")
        data_dir = Path(tmp.name) / "movielens-100k"
        ingest(open_source("movielens", args.movielens, None), data_dir)
    rows = []
    for split_seed in args.split_seeds:
        for seed in args.seeds:
            for preset in args.presets:
                print(f"{preset} split_seed={split_seed} seed={seed} ...", file=sys.stderr, flush=True)
                row = one_run(
                    data_dir, preset, args.split, split_seed, seed, extra, args.loss_epochs, args.pipeline
                )
                rows.append(row)
                print(json.dumps(row), flush=True)
    for line in summarise(rows, args.baseline):
        print(json.dumps(line), flush=True)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
