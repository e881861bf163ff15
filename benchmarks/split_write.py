"""Peak memory and wall time of writing every split of a dataset (``write_all``, seed 0, the
default rule; issue 16's scale runs, where the splits set the peak of ``parpo data synth``).

Each repeat copies the dataset's files without ``splits/`` into a temporary folder and runs
``write_all`` there in its own subprocess (``peak_rss_gb`` is its ``VmHWM``, which includes
the interpreter and polars, about 0.2 GB); prints one JSON line per repeat and one with the
medians. The parts' digest (rows and a hash of every part) tells two codes apart that cut
different splits. To compare with another commit, run this file with that checkout's
interpreter from its root (``cd OLD && .venv/bin/python NEW/benchmarks/split_write.py``).

    python benchmarks/split_write.py --data /tmp/w35k --repeats 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def peak_rss_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def one(data: Path) -> dict[str, object]:
    """Write every split of ``data`` (a copy without splits) in this process."""
    import polars as pl

    from data_pipelines.dataset import Dataset
    from data_pipelines.splits import write_all

    with tempfile.TemporaryDirectory(prefix="split-write-") as tmp:
        root = Path(tmp) / "data"
        shutil.copytree(data, root, ignore=shutil.ignore_patterns("splits"))
        ds = Dataset(root)
        rows = ds.interactions().select(pl.len()).collect().item()
        started = time.perf_counter()
        folders = write_all(ds, seed=0)
        seconds = time.perf_counter() - started
        digest = hashlib.sha256()
        for name in sorted(folders):
            for part in sorted(folders[name].glob("*.parquet")):
                df = pl.read_parquet(part)
                digest.update(f"{name}/{part.stem}:{df.height}:{int(df.hash_rows(seed=1).sum())}".encode())
    return {
        "rows": rows,
        "splits": sorted(folders),
        "seconds": round(seconds, 2),
        "peak_rss_gb": round(peak_rss_gb(), 3),
        "parts_digest": digest.hexdigest()[:16],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="A dataset folder (its splits/ is not read).")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.data)))
        return
    runs = []
    for r in range(a.repeats):
        out = subprocess.run(
            [sys.executable, __file__, "--one", "--data", str(a.data)],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps({"bench": "split_write", "repeat": r, **runs[-1]}), flush=True)
    print(
        json.dumps(
            {
                "bench": "split_write",
                "data": str(a.data),
                "rows": runs[0]["rows"],
                "repeats": a.repeats,
                "seconds": statistics.median(x["seconds"] for x in runs),
                "peak_rss_gb": statistics.median(x["peak_rss_gb"] for x in runs),
                "parts_digest": sorted({x["parts_digest"] for x in runs}),
            }
        )
    )


if __name__ == "__main__":
    main()
