"""A stage-2 training step's cost per triple on two datasets, their steps interleaved.

Issue 16 asks that seconds per 1M training triples stay within 1.5x from 1M to 5M positives.
Two separate runs of ``reward_scale.py`` on this noisy 2-core machine gave ratios from 1.2x to
2.1x for the same training step, so this loads both datasets in one process and alternates their steps
(one step of A, one of B, ...): both see the same load, and the ratio of medians is the figure.

A step is what the trainer does per batch, without Lightning: the stream's next batch (sampler,
impressions), ``RewardModule.training_step`` (forward, losses), backward and the preset's
optimiser step; stage 1 off (its initialisation does not change a step's cost), one torch thread.
One JSON line per dataset and a summary line (B's median s per 1M triples over A's).

    python benchmarks/reward_step_pair.py /tmp/w1m /tmp/w5m
    python benchmarks/reward_step_pair.py /tmp/w1m /tmp/w5m --steps 60 train.optimizer=adam
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_pipelines.dataset import Dataset  # noqa: E402
from parpo.presets import load  # noqa: E402
from reward_models.config import RewardConfig  # noqa: E402
from reward_models.pipeline import load_training_data  # noqa: E402
from reward_models.training.datamodule import make_stream  # noqa: E402
from reward_models.training.module import RewardModule  # noqa: E402


class Trainee:
    """One dataset's module, optimiser and endless batch stream."""

    def __init__(self, path: Path, preset: str, over: list[str]) -> None:
        cfg = load(RewardConfig, "reward", preset, ["stage1.enabled=false", *over])
        t0 = time.perf_counter()
        self.data = load_training_data(cfg, Dataset(path))
        self.load_s = time.perf_counter() - t0
        self.name = path.name
        self.module = RewardModule(self.data, cfg)
        self.opt = self.module.configure_optimizers()
        self.stream = make_stream(self.data, cfg)
        self.batches = self._endless()
        self.times: list[float] = []
        self.fetch: list[float] = []
        self.triples: list[int] = []

    def _endless(self) -> Iterator[dict[str, Any]]:
        while True:
            yield from self.stream

    def step(self, record: bool) -> None:
        t0 = time.perf_counter()
        batch = next(self.batches)
        t1 = time.perf_counter()
        loss = self.module.training_step(batch, 0)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        t2 = time.perf_counter()
        if record:
            self.times.append(t2 - t0)
            self.fetch.append(t1 - t0)
            self.triples.append(int(batch["user"].shape[0]))

    def summary(self) -> dict[str, Any]:
        per_m = [t * 1e6 / n for t, n in zip(self.times, self.triples, strict=True)]
        return {
            "bench": "reward_step_pair",
            "data": self.name,
            "users": self.data.n_users,
            "items": self.data.n_items,
            "train_positives": self.data.n_train,
            "load_s": round(self.load_s, 1),
            "steps": len(self.times),
            "triples_per_step": round(statistics.median(self.triples)),
            "s_per_step": round(statistics.median(self.times), 4),
            "fetch_s_per_step": round(statistics.median(self.fetch), 4),
            "s_per_1m_triples": round(statistics.median(per_m), 3),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("small", type=Path)
    ap.add_argument("large", type=Path)
    ap.add_argument("overrides", nargs="*", help="config overrides (key=value) for both")
    ap.add_argument("--preset", default="dice")
    ap.add_argument("--steps", type=int, default=40, help="timed steps per dataset")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per dataset first")
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message=".*self.log.*")  # no trainer here: logging is not measured
    pair = [Trainee(p, args.preset, args.overrides) for p in (args.small, args.large)]
    for k in range(args.warmup + args.steps):
        for t in pair:
            t.step(record=k >= args.warmup)
    rows = [t.summary() for t in pair]
    for r in rows:
        print(json.dumps(r), flush=True)
    ratio = rows[1]["s_per_1m_triples"] / rows[0]["s_per_1m_triples"]
    print(json.dumps({"bench": "reward_step_pair", "summary": True, "large_over_small": round(ratio, 2)}))


if __name__ == "__main__":
    main()
