"""Wall and CPU time, and peak memory, of a reward model's full evaluation (``reward_models.pipeline.
evaluate_weights``: every section ``parpo reward train`` writes to ``metrics.json``) on a dataset's
split, with random tables in place of a trained model's (the cost does not depend on the values).

Each repeat runs in its own subprocess (``peak_rss_gb`` is its ``VmHWM``: the split's data, the
vectors and the evaluation); prints one JSON line per repeat and one with the medians, with a few
of the metrics so that two codes can be compared on the same numbers. To compare with another
commit, run this file with that checkout's interpreter from its root
(``cd OLD && .venv/bin/python NEW/benchmarks/reward_eval.py ...``).

    python benchmarks/reward_eval.py --data /tmp/w35k --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: Metrics printed with the timings (sampled ones, the Spearman values, move with the sampler).
SHOWN = (
    "test.ndcg@10",
    "baselines.mostpop.test.ndcg@10",
    "synthetic.uniform.ndcg@10",
    "report_half.ndcg@10",
    "synthetic.interest_spearman",
)


def peak_rss_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def _flat(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def one(data: Path, dim: int) -> dict[str, object]:
    """Load the ``dice`` preset's split of ``data`` and evaluate random vectors, in this process."""
    import torch

    from data_pipelines.dataset import Dataset
    from parpo.presets import load
    from reward_models.config import RewardConfig
    from reward_models.pipeline import evaluate_weights, load_training_data

    torch.set_num_threads(1)
    cfg = load(RewardConfig, "reward", "dice", [])
    rd = load_training_data(cfg, Dataset(data))
    g = torch.Generator().manual_seed(0)
    sizes = {"user": rd.n_users, "item": rd.n_items}
    weights = {f"{side}_{b}": torch.randn(n, dim, generator=g) for b in ("interest", "conformity") for side, n in sizes.items()}  # fmt: skip
    wall, cpu = time.perf_counter(), time.process_time()
    res = evaluate_weights(cfg, weights, rd, None)  # what publish runs (no stage 1: no cold profiles)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    flat = _flat(res)
    return {
        "users": rd.n_users,
        "items": rd.n_items,
        "seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_gb": round(peak_rss_gb(), 3),
        "metrics": {k: round(float(flat[k]), 6) for k in SHOWN if k in flat},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="A dataset folder with its splits.")
    ap.add_argument("--dim", type=int, default=32, help="Width of each branch's random vectors.")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.data, a.dim)))
        return
    runs = []
    for r in range(a.repeats):
        out = subprocess.run(
            [sys.executable, __file__, "--one", "--data", str(a.data), "--dim", str(a.dim)],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps({"bench": "reward_eval", "repeat": r, **runs[-1]}), flush=True)
    print(
        json.dumps(
            {
                "bench": "reward_eval",
                "data": str(a.data),
                "users": runs[0]["users"],
                "items": runs[0]["items"],
                "repeats": a.repeats,
                "seconds": statistics.median(x["seconds"] for x in runs),
                "cpu_seconds": statistics.median(x["cpu_seconds"] for x in runs),
                "peak_rss_gb": statistics.median(x["peak_rss_gb"] for x in runs),
                "metrics": runs[0]["metrics"],
            }
        )
    )


if __name__ == "__main__":
    main()
