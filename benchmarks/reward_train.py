"""Stage-2 reward-model training speed and the quality it reaches, in one run: ours (Lightning) vs a plain loop.

- ``ours``: what ``benchmarks/reward_quality.py`` runs for one (split seed, seed):
  ``RewardData.load`` + ``reward_models.training.fit`` (Lightning: early stopping on valid
  NDCG@10, best-epoch weights) + the test evaluation (``reward_models.evaluate``), with the
  same overrides (no progress bar, no checkpoint files, ``stage1.enabled=false``: the
  targets are for stage 2). ``run_seconds`` is that whole span (interpreter start and
  imports excluded); ``train_triples_per_s`` is triples trained per second of training
  (sampling included, validation excluded: ``FitResult.triples_per_s``).
- ``plain``: the floor. The same model, losses, sampler, batch size and optimiser, driven by
  a bare PyTorch loop (``RewardModule.training_step``, ``backward``, ``step``): no Trainer,
  no validation, no callbacks, for as many optimiser steps as ``ours`` took. ``same_weights``
  checks that it ends with the very weights ``ours`` ended with (before best-epoch
  restore), so the two time the same computation: bit for bit on the CPU, within 1e-4 on
  CUDA (atomic adds in no fixed order); ``max_abs_weight_diff`` gives the gap.

``ratio_to_plain_loop`` = ours / plain triples per second (1.0: Lightning costs nothing).
Repeats alternate ours and plain; figures are medians. ``*_cpu_*`` figures use process CPU
time, which other jobs on a shared machine disturb less than wall time (one torch thread
makes them comparable); ``loadavg_1m`` is the load before and after.

    python benchmarks/reward_train.py --data /tmp/ml                 # an ingested ML-100K
    python benchmarks/reward_train.py --movielens ../shared/data/movielens-100k --repeats 3
    python benchmarks/reward_train.py --movielens ../shared/data/movielens-100k --presets dice dice_v1

Presets may be ``reward_quality.VARIANTS`` (``dice_v1``: the dice model before hybrid features,
impression negatives and the new selection). With two or more presets, a last line
``reward_train_ratio`` gives each preset's training triples/s over the first one's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import torch  # noqa: E402
from reward_quality import VARIANTS  # noqa: E402
from reward_sampler import git_sha  # noqa: E402

if TYPE_CHECKING:
    from reward_models.config import RewardConfig
    from reward_models.data import RewardData

TARGETS = {"train_triples_per_s": 1e6, "run_seconds": 8.0}
#: the quality runs' overrides (benchmarks/reward_quality.py) plus stage 2 only
QUALITY_OVERRIDES = ["train.progress_bar=false", "train.checkpoint=false", "stage1.enabled=false"]


def config(preset: str, split: str, split_seed: int, seed: int, extra: list[str]) -> RewardConfig:
    from parpo.presets import load
    from reward_models.config import RewardConfig

    base, variant = VARIANTS.get(preset, (preset, []))
    over = [f"split.name={split}", f"split.seed={split_seed}", f"runtime.seed={seed}", *QUALITY_OVERRIDES]
    return load(RewardConfig, "reward", base, [*over, *variant, *extra])


def device_of(cfg: RewardConfig) -> str:
    """Where Lightning's ``auto`` accelerator puts the run (CUDA when present, else the CPU)."""
    return "cuda" if cfg.runtime.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"


def run_ours(data_dir: Path, cfg: RewardConfig) -> dict[str, Any]:
    """Load + fit to early stop + test, timed as one span (the ``run_seconds`` of the issue)."""
    from data_pipelines.dataset import Dataset
    from reward_models.data import RewardData
    from reward_models.evaluate import evaluate
    from reward_models.pipeline import attach_side_inputs, export_weights, readout_vectors
    from reward_models.training import fit

    t0, c0 = time.perf_counter(), time.process_time()
    ds = Dataset(data_dir)
    data = RewardData.load(ds, cfg.split.name, cfg.split.seed, cfg.split.positives, cfg.split.algorithm)
    attach_side_inputs(cfg, ds, data)  # impressions and features, as ``parpo reward train`` does
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="reward-train-") as run:
        res = fit(cfg, data, run)
    t2 = time.perf_counter()
    m = evaluate(readout_vectors(export_weights(res.tables, data), data), data, cfg.eval.ks, baselines=False)
    t3, c3 = time.perf_counter(), time.process_time()
    return {
        "run_seconds": t3 - t0,
        "run_cpu_seconds": c3 - c0,
        "batch_size": cfg.train.batch_for(data.n_train),  # ``auto`` resolved
        "load_seconds": t1 - t0,
        "fit_seconds": t2 - t1,
        "test_seconds": t3 - t2,
        "train_seconds": res.train_seconds,
        "train_triples_per_s": res.triples_per_s,
        "train_cpu_triples_per_s": res.triples / max(res.train_cpu_seconds, 1e-9),
        "triples": res.triples,
        "epochs": res.epochs,
        "steps": res.steps,
        "best_epoch": res.best_epoch,
        "valid_ndcg@10": m["valid"]["ndcg@10"],
        "test_ndcg@10": m["test"]["ndcg@10"],
        "test_recall@10": m["test"]["recall@10"],
        "_data": data,
        "_final": res.module.model.export(),  # the last step's weights, for the plain loop's check
    }


def run_plain(data: RewardData, cfg: RewardConfig, steps: int) -> dict[str, Any]:
    """The same ``steps`` optimiser steps with a bare loop (step-based evaluation can stop mid-epoch);
    the stream is built outside the timing (Lightning builds it in ``setup``, outside its training
    time too)."""
    from reward_models.training import RewardModule, make_stream

    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    device = torch.device(device_of(cfg))
    module = RewardModule(data, cfg).to(device)
    opt = module.configure_optimizers()
    stream = make_stream(data, cfg)
    triples = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while steps > 0:
        for i, batch in enumerate(stream):
            if steps == 0:
                break
            steps -= 1
            if device.type != "cpu":
                batch = {
                    k: v.to(device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()
                }
            loss = module.training_step(batch, i)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            triples += batch["user"].shape[0]
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "train_seconds": seconds,
        "train_triples_per_s": triples / seconds,
        "train_cpu_triples_per_s": triples / cpu,
        "_final": module.model.export(),
    }


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def bench(data_dir: Path, preset: str, args: argparse.Namespace) -> dict[str, Any]:
    extra = list(args.overrides) + [f"runtime.threads={args.threads}"] * bool(args.threads)
    cfg = config(preset, args.split, args.split_seed, args.seed, extra)
    load_start = os.getloadavg()[0]
    ours, plain, diffs = [], [], []
    for r in range(args.repeats):
        print(f"{preset} repeat {r + 1}/{args.repeats}: ours ...", file=sys.stderr, flush=True)
        o = run_ours(data_dir, cfg)
        print(
            f"{preset} repeat {r + 1}/{args.repeats}: plain ({o['steps']} steps) ...",
            file=sys.stderr,
            flush=True,
        )
        p = run_plain(o.pop("_data"), cfg, o["steps"])
        diffs.append(max_abs_diff(o.pop("_final"), p.pop("_final")))
        ours.append(o)
        plain.append(p)

    def med(rows: list[dict[str, Any]], k: str) -> float:
        return statistics.median(row[k] for row in rows)

    tps, plain_tps = med(ours, "train_triples_per_s"), med(plain, "train_triples_per_s")
    run_s = med(ours, "run_seconds")
    first = ours[0]
    return {
        "bench": "reward_train",
        "model": preset,
        "data": args.data_name,
        "split": args.split,
        "split_seed": args.split_seed,
        "seed": args.seed,
        "device": device_of(cfg),
        "threads": torch.get_num_threads(),
        "batch_size": first["batch_size"],
        "train_triples_per_s": round(tps),
        "plain_triples_per_s": round(plain_tps),
        "ratio_to_plain_loop": round(tps / plain_tps, 3),
        "run_seconds": round(run_s, 3),
        "run_cpu_seconds": round(med(ours, "run_cpu_seconds"), 3),
        "train_cpu_triples_per_s": round(med(ours, "train_cpu_triples_per_s")),
        "plain_cpu_triples_per_s": round(med(plain, "train_cpu_triples_per_s")),
        "cpu_ratio_to_plain_loop": round(
            med(ours, "train_cpu_triples_per_s") / med(plain, "train_cpu_triples_per_s"), 3
        ),
        **{
            k: round(med(ours, k), 3)
            for k in ("load_seconds", "fit_seconds", "train_seconds", "test_seconds")
        },
        # the quality reached in the timed runs (deterministic: identical over repeats on one device)
        **{k: round(first[k], 5) for k in ("valid_ndcg@10", "test_ndcg@10", "test_recall@10")},
        **{k: first[k] for k in ("epochs", "best_epoch", "steps", "triples")},
        # CPU: bit-identical; CUDA's index_add_ adds in no fixed order, so rounding may differ
        "same_weights": max(diffs) <= (0.0 if device_of(cfg) == "cpu" else 1e-4),
        "max_abs_weight_diff": max(diffs),
        "meets": {
            "train_triples_per_s": tps >= TARGETS["train_triples_per_s"],
            "run_seconds": run_s <= TARGETS["run_seconds"],
        },
        "repeats": args.repeats,
        "runs": {
            "ours_triples_per_s": [round(o["train_triples_per_s"]) for o in ours],
            "plain_triples_per_s": [round(p["train_triples_per_s"]) for p in plain],
            "run_seconds": [round(o["run_seconds"], 3) for o in ours],
        },
        "cpus": os.cpu_count(),
        "loadavg_1m": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "git": git_sha(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", type=Path, help="an ingested dataset folder")
    src.add_argument("--movielens", type=Path, help="the raw ML-100K folder (ingested into a temp folder)")
    ap.add_argument("--presets", nargs="+", default=["dice", "mf"])
    ap.add_argument("--split", default="intervened")
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: library default)")
    ap.add_argument("overrides", nargs="*", help="extra dotted overrides, e.g. runtime.device=cpu")
    args = ap.parse_args()
    tmp = None
    data_dir = args.data
    if args.movielens is not None:
        from data_pipelines.adapters import open_source
        from data_pipelines.ingest import ingest

        tmp = tempfile.TemporaryDirectory(prefix="reward-train-ml-")
        data_dir = Path(tmp.name) / "movielens-100k"
        ingest(open_source("movielens", args.movielens, None), data_dir)
    args.data_name = "movielens-100k" if args.movielens is not None else data_dir.name
    rows = []
    for preset in args.presets:
        rows.append(bench(data_dir, preset, args))
        print(json.dumps(rows[-1]), flush=True)
    if len(rows) > 1:
        first = rows[0]
        ratio = {r["model"]: round(r["train_triples_per_s"] / first["train_triples_per_s"], 3) for r in rows}
        cpu = {
            r["model"]: round(r["train_cpu_triples_per_s"] / first["train_cpu_triples_per_s"], 3)
            for r in rows
        }
        print(
            json.dumps(
                {
                    "bench": "reward_train_ratio",
                    "reference": first["model"],
                    "triples_per_s": ratio,
                    "cpu_triples_per_s": cpu,
                }
            )
        )
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
