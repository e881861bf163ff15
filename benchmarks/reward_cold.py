"""Stage 1 of the reward model: cold users, cold items, warm users and the Coat study.

One JSON line per (study, data, seed) with every method's metrics side by side (the
same stage-2 weights for every cold method of a run), then one summary line per study
and data (mean ± std over seeds, and paired differences against each baseline).
Progress goes to stderr.

    python benchmarks/reward_cold.py --movielens ../shared/data/movielens-100k \\
        --coat ../shared/data/coat --synth --seeds 0 1 2

Studies (``--studies``):
- ``cold_users`` (ML-100K with u.user features, synthetic with region/age features):
  ``cold_users`` split, NDCG@10 of stage 1 (profile map from ``cold_profile`` +
  features) vs MostPop vs the mean warm user vector vs the mean of the profile
  items' vectors (the readout's stage-2-only cold path).
- ``cold_items`` (synthetic): ``cold_items`` split, never-trained items ranked for each
  test user: attribute map vs category popularity vs the mean warm item (all tie).
- ``warm`` (ML-100K, synthetic): ``intervened`` test NDCG@10 of DICE with stage 1's
  link ``init`` / ``regularize`` vs stage 1 off.
- ``coat``: self-selected ratings >= 4 -> ``native`` split; each user's 16 uniformly
  random items ranked, NDCG@5: MF-BPR, DICE, DICE + stage 1 (with / without features).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COMMON = ["train.progress_bar=false", "train.checkpoint=false"]


def train(data_dir: Path, preset: str, split: str, seed: int, extra: list[str]):
    """(cfg, dataset, data, weights, stage-1 metadata) of one run."""
    from data_pipelines.dataset import Dataset
    from parpo.presets import load
    from reward_models.config import RewardConfig
    from reward_models.data import RewardData
    from reward_models.pipeline import train_weights

    cfg = load(
        RewardConfig, "reward", preset, [f"split.name={split}", f"runtime.seed={seed}", *COMMON, *extra]
    )
    ds = Dataset(data_dir)
    data = RewardData.load(ds, split, cfg.split.seed, cfg.split.positives, cfg.split.algorithm)
    with tempfile.TemporaryDirectory(prefix="reward-cold-") as run:
        _, weights, meta = train_weights(cfg, ds, data, Path(run))
    return cfg, ds, data, weights, meta


def stage2_only(weights: dict) -> dict:
    return {k: v for k, v in weights.items() if not k.startswith("stage1.")}


def vectors(weights: dict, data, meta: dict | None, profiles: dict | None):
    from reward_models.evaluate import Vectors
    from reward_models.readout import RewardModel

    m = RewardModel(weights, data.user_ids(), data.item_ids(), {"stage1": meta} if meta else None)
    return Vectors(m.user_vectors(data.user_ids(), profiles)[0], m.item_vectors(data.item_ids())[0])


def cold_users(data_dir: Path, name: str, seed: int, extra: list[str]) -> dict[str, Any]:
    from reward_models.evaluate import mostpop_scorer
    from reward_models.pipeline import cold_profiles
    from reward_models.profile.evaluate import cold_user_ranking

    cfg, _, data, w, meta = train(data_dir, "dice", "cold_users", seed, extra)
    prof, ks = cold_profiles(data.cold_profile), [10, 20]
    scorers = {
        "stage1": vectors(w, data, meta, prof).scorer(),
        "profile_items_mean": vectors(stage2_only(w), data, None, prof).scorer(),
        "mean_user": vectors(stage2_only(w), data, None, None).scorer(),
        "mostpop": mostpop_scorer(data.popularity),
    }
    return {k: cold_user_ranking(s, data, ks) for k, s in scorers.items()}


def cold_items(data_dir: Path, name: str, seed: int, extra: list[str]) -> dict[str, Any]:
    from reward_models.evaluate import mostpop_scorer
    from reward_models.profile.evaluate import category_popularity, cold_item_ranking

    cfg, ds, data, w, meta = train(data_dir, "dice", "cold_items", seed, extra)
    scorers = {
        "attribute_map": vectors(w, data, meta, None).scorer(),
        "category_popularity": mostpop_scorer(category_popularity(ds, data)),
        "mean_item": vectors(stage2_only(w), data, None, None).scorer(),
    }
    return {k: cold_item_ranking(s, data, [10, 20]) for k, s in scorers.items()}


def warm(data_dir: Path, name: str, seed: int, extra: list[str]) -> dict[str, Any]:
    from reward_models.evaluate import ranking

    out = {}
    for label, over in (
        ("stage1_off", ["stage1.enabled=false"]),
        ("link_init", ["stage1.link=init"]),
        ("link_regularize", ["stage1.link=regularize"]),
    ):
        _, _, data, w, meta = train(data_dir, "dice", "intervened", seed, [*extra, *over])
        out[label] = ranking(vectors(w, data, meta or None, None).scorer(), data, "test", [10, 20])
    return out


def coat(data_dir: Path, name: str, seed: int, extra: list[str]) -> dict[str, Any]:
    from reward_models.profile.evaluate import random_test_ndcg

    out = {}
    for label, preset, over in (
        ("mf_bpr", "mf", []),
        ("dice", "dice", ["stage1.enabled=false"]),
        ("dice_stage1_no_features", "dice", ["stage1.user_features=false"]),
        ("dice_stage1_features", "dice", []),
    ):
        _, ds, data, w, meta = train(
            data_dir, preset, "native", seed, ["split.positives.min_value=4", *extra, *over]
        )
        out[label] = random_test_ndcg(vectors(w, data, meta or None, None).scorer(), ds, data, k=5)
    return out


STUDIES = {"cold_users": cold_users, "cold_items": cold_items, "warm": warm, "coat": coat}
METRIC = {"cold_users": "ndcg@10", "cold_items": "ndcg@10", "warm": "ndcg@10", "coat": "ndcg@5"}
BASELINES = {
    "cold_users": ("stage1", ["mostpop", "mean_user", "profile_items_mean"]),
    "cold_items": ("attribute_map", ["category_popularity", "mean_item"]),
    "warm": ("link_init", ["stage1_off"]),
    "coat": ("dice_stage1_features", ["mf_bpr", "dice", "dice_stage1_no_features"]),
}


def summary(study: str, data: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    key = METRIC[study]
    methods = list(rows[0]["results"])
    vals = {m: [r["results"][m][key] for r in rows] for m in methods}

    def ms(xs: list[float]) -> str:
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        return f"{statistics.mean(xs):.4f} ± {sd:.4f}"

    ours, bases = BASELINES[study]
    out = {"bench": "reward_cold", "study": study, "data": data, "summary": True, "metric": key}
    out |= {m: ms(v) for m, v in vals.items()}
    for b in bases:
        diff = [a - c for a, c in zip(vals[ours], vals[b], strict=True)]
        out[f"{ours}-{b}"] = ms(diff)
        out[f"{ours}>{b}_runs"] = f"{sum(d > 0 for d in diff)}/{len(diff)}"
    out["seeds"] = [r["seed"] for r in rows]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--movielens", type=Path, help="raw ML-100K folder (ingested into a temp folder)")
    p.add_argument("--coat", type=Path, help="raw Coat folder (ingested into a temp folder)")
    p.add_argument("--synth", action="store_true", help="the default synthetic dataset (seed 0)")
    p.add_argument("--studies", nargs="+", default=list(STUDIES), choices=list(STUDIES))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("overrides", nargs="*", help="config overrides KEY=VALUE for every run")
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    extra = [f"runtime.threads={args.threads}", *args.overrides]
    tmp = tempfile.TemporaryDirectory(prefix="reward-cold-data-")
    datasets: dict[str, Path] = {}
    from data_pipelines.adapters import open_source
    from data_pipelines.ingest import ingest

    for name, path in (("movielens", args.movielens), ("coat", args.coat)):
        if path is not None:
            datasets[name] = Path(tmp.name) / name
            ingest(open_source(name, path, None), datasets[name])
    if args.synth:
        from data_pipelines.synth import SynthConfig, write

        datasets["synthetic"] = Path(tmp.name) / "synthetic"
        write(SynthConfig(seed=0), datasets["synthetic"])
    plan = {
        "cold_users": ["movielens", "synthetic"],
        "cold_items": ["synthetic"],
        "warm": ["movielens", "synthetic"],
        "coat": ["coat"],
    }
    for study in args.studies:
        for name in plan[study]:
            if name not in datasets:
                continue
            rows = []
            for seed in args.seeds:
                print(f"{study} {name} seed={seed} ...", file=sys.stderr, flush=True)
                t0 = time.perf_counter()
                res = STUDIES[study](datasets[name], name, seed, extra)
                row = {"bench": "reward_cold", "study": study, "data": name, "seed": seed, "results": res}
                row["seconds"] = round(time.perf_counter() - t0, 1)
                print(json.dumps(row), flush=True)
                rows.append(row)
            print(json.dumps(summary(study, name, rows)), flush=True)
    tmp.cleanup()


if __name__ == "__main__":
    main()
