"""Pair leaks of the split algorithms, side by side: 1 (rows, the baseline) against 2 (pairs).

For each dataset, history split and algorithm, one JSON line: rows per part, how many
valid/test rows share a (user, item) pair with train (and test with valid), Coat's
``native`` test included, how many ``cold_test`` rows share a pair with their user's
``cold_profile`` (profile rows are all event types, impressions included), and the
seconds to cut the split (median of ``--repeats``; the users' hashes are shared by both
algorithms and not timed).

Datasets: the synthetic default (``SynthConfig()``, generator seed ``--synth-seed``)
and every dataset of ``--shared`` (``../shared/data``) present, ingested into a temp folder::

    python benchmarks/split_pairs.py --shared ../shared/data --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from data_pipelines.adapters import open_source
from data_pipelines.dataset import Dataset
from data_pipelines.ingest import ingest
from data_pipelines.splits import ALGORITHMS, Prepared, applicable_splits, compute_split, pair_overlap
from data_pipelines.splits.overlap import HELD_OUT
from data_pipelines.synth import SynthConfig, write

SHARED = {
    "taobao": "taobao-userbehavior-sample",
    "amazon-s3rec": "amazon-beauty-5core-s3rec",
    "movielens": "movielens-100k",
    "coat": "coat",
    "obd": "open-bandit-dataset-small",
}


def datasets(work: Path, shared: Path | None, synth_seed: int) -> dict[str, Dataset]:
    out = {}
    write(SynthConfig(seed=synth_seed), work / "synthetic", splits=False)
    out[f"synthetic-default-seed{synth_seed}"] = Dataset(work / "synthetic")
    for source, folder in SHARED.items():
        if shared is not None and (shared / folder).exists():
            ingest(open_source(source, shared / folder), work / source)
            out[folder] = Dataset(work / source)
    return out


def measure(ds: Dataset, name: str, algorithm: int, repeats: int) -> dict:
    seconds = []
    for _ in range(repeats):
        p = Prepared.of(ds, algorithm=algorithm)
        _ = p.history  # hashing users is the same work under both algorithms
        t0 = time.perf_counter()
        s = compute_split(ds, name, algorithm=algorithm, prepared=p)
        seconds.append(time.perf_counter() - t0)
    return {
        "counts": {k: v for k, v in s.meta["counts"].items()},
        **pair_overlap(s.parts(), [*HELD_OUT, ("cold_test", "cold_profile")]),
        "seconds": round(statistics.median(seconds), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=None, help="../shared/data (real datasets), if present")
    ap.add_argument("--synth-seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for label, ds in datasets(Path(tmp), args.shared, args.synth_seed).items():
            for name in applicable_splits(ds):
                rec = {"bench": "split_pairs", "data": label, "split": name}
                for algorithm in ALGORITHMS:
                    rec[f"algorithm{algorithm}"] = measure(ds, name, algorithm, args.repeats)
                print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
