"""DICE negative sampler benchmark: ours (vectorised torch) vs a per-sample reference, on Amazon Beauty.

- ``ours``: ``reward_models.sampler.PopularityNegativeSampler.epoch`` for
  ``--epochs`` epochs of every positive, the margin following the DICE
  curriculum (``margin * margin_decay ** epoch``), batches of ``--batch-size``
  iterated the way a trainer does. Building the sampler is timed apart
  (``setup_s``).
- ``reference``: the official DICE code's way (``DICESampler`` in its
  ``utils.py``), one positive at a time: ``np.nonzero`` over the popularity
  vector for each side, ``np.isin`` against the user's train positives to drop
  them, a coin between the sides, ``np.random.randint`` inside the side. Same
  data, same margin rule as ours (``pop[i] - margin`` on the less popular side).
  Timed on ``--reference-samples`` positives.

Data: ``Beauty.txt`` (one user per line, ``user item item ...``) read directly
into dense indices; every interaction is a positive (198,502) and popularity is
the count of positives per item. After the timed runs both samplers' triples
are checked (never a user positive, ``neg_more_popular == pop[neg] >
pop[pos]``, the margin kept outside fallbacks): the ``check`` field.

    python benchmarks/reward_sampler.py --repeats 3

Prints one JSON object per batch size; rates are medians over ``--repeats``
of wall time (``*_cpu_*``: of process CPU time, which other processes on a
shared machine disturb less; ``loadavg_1m`` gives the load before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from reward_models.curriculum import Curriculum  # noqa: E402
from reward_models.sampler import PopularityNegativeSampler  # noqa: E402

BEAUTY = Path("/work/shared/data/amazon-beauty-5core-s3rec/Beauty.txt")


def load_beauty(path: Path) -> tuple[np.ndarray, np.ndarray, int, int]:
    users: list[int] = []
    items: list[int] = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        users += [int(parts[0])] * (len(parts) - 1)
        items += [int(x) for x in parts[1:]]
    _, user = np.unique(np.array(users, dtype=np.int64), return_inverse=True)
    _, item = np.unique(np.array(items, dtype=np.int64), return_inverse=True)
    return user.astype(np.int64), item.astype(np.int64), int(user.max()) + 1, int(item.max()) + 1


class ReferenceSampler:
    """The per-sample DICE sampler, written as the official code does it (one negative per positive)."""

    def __init__(self, user: np.ndarray, item: np.ndarray, n_users: int, popularity: np.ndarray, seed: int):
        order = np.argsort(user, kind="stable")
        bounds = np.searchsorted(user[order], np.arange(n_users + 1))
        by_user = item[order]
        self.rows = [by_user[bounds[u] : bounds[u + 1]].copy() for u in range(n_users)]  # lil_record.rows
        self.user, self.item, self.popularity = user, item, popularity
        np.random.seed(seed)

    def sample(self, index: int, margin: float) -> tuple[int, int, int, bool]:
        user, pos_item = int(self.user[index]), int(self.item[index])
        user_pos = self.rows[user]
        item_pos_pop = self.popularity[pos_item]
        pop_items = np.nonzero(self.popularity > item_pos_pop + margin)[0]
        pop_items = pop_items[np.logical_not(np.isin(pop_items, user_pos))]
        unpop_items = np.nonzero(self.popularity < item_pos_pop - margin)[0]
        unpop_items = unpop_items[np.logical_not(np.isin(unpop_items, user_pos))]
        if len(pop_items) and (not len(unpop_items) or np.random.random() < 0.5):
            return user, pos_item, int(pop_items[np.random.randint(len(pop_items))]), True
        if len(unpop_items):
            return user, pos_item, int(unpop_items[np.random.randint(len(unpop_items))]), False
        free = np.nonzero(np.logical_not(np.isin(np.arange(len(self.popularity)), user_pos)))[0]
        neg = int(free[np.random.randint(len(free))])
        return user, pos_item, neg, bool(self.popularity[neg] > item_pos_pop)


def check(user, pos, neg, mask, fallback, key: set[tuple[int, int]], pop: np.ndarray, margin: float) -> str:
    if any((u, j) in key for u, j in zip(user.tolist(), neg.tolist(), strict=True)):
        return "negative is a user positive"
    if not np.array_equal(mask, pop[neg] > pop[pos]):
        return "neg_more_popular differs from pop[neg] > pop[pos]"
    gap = (pop[neg] - pop[pos])[~fallback]
    if not ((gap > margin) | (gap < -margin)).all():
        return "margin not kept"
    return "ok"


def git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=BEAUTY)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[8192, 1024])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--margin", type=float, default=40.0)
    p.add_argument("--margin-decay", type=float, default=0.9)
    p.add_argument("--reference-samples", type=int, default=20_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch intra-op threads to try")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not args.data.exists():
        sys.exit(f"error: {args.data}: Amazon Beauty not found (see /work/shared/data)")

    user, item, n_users, n_items = load_beauty(args.data)
    pop = np.bincount(item, minlength=n_items)
    key = set(zip(user.tolist(), item.tolist(), strict=True))
    cur = Curriculum(margin=args.margin, margin_decay=args.margin_decay)
    n = len(user)

    # Reference: per-sample, on a fixed random subset of positives, at the first epoch's margin.
    ref = ReferenceSampler(user, item, n_users, pop, args.seed)
    subset = np.random.default_rng(args.seed).permutation(n)[: args.reference_samples]
    load_start = os.getloadavg()[0]
    ref_times, ref_cpu, ref_out = [], [], None
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = [ref.sample(int(k), args.margin) for k in subset]
        ref_times.append(time.perf_counter() - t0)
        ref_cpu.append(time.process_time() - c0)
        ref_out = out
    ref_rate = len(subset) / statistics.median(ref_times)
    r = np.array(ref_out, dtype=np.int64)
    ref_check = check(
        r[:, 0], r[:, 1], r[:, 2], r[:, 3].astype(bool), np.zeros(len(r), bool), key, pop, args.margin
    )

    ut, it = torch.from_numpy(user), torch.from_numpy(item)
    for threads, batch_size in [(t, b) for t in args.threads for b in args.batch_sizes]:
        torch.set_num_threads(threads)
        times, cpu, setups = [], [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            s = PopularityNegativeSampler(
                ut, it, n_users, n_items, generator=torch.Generator().manual_seed(args.seed)
            )
            t1, c1 = time.perf_counter(), time.process_time()
            count = 0
            for epoch in range(args.epochs):
                for t in s.epoch(cur.margin_at(epoch), batch_size):
                    count += len(t)
            times.append(time.perf_counter() - t1)
            cpu.append(time.process_time() - c1)
            setups.append(t1 - t0)
        ours_rate = count / statistics.median(times)
        # Invariants on a whole epoch at the first margin (outside the timed part).
        s = PopularityNegativeSampler(
            ut, it, n_users, n_items, generator=torch.Generator().manual_seed(args.seed)
        )
        t = s.sample(torch.randperm(n), margin=cur.margin_at(0))
        ours_check = check(
            t.user.numpy(),
            t.pos.numpy(),
            t.neg.numpy(),
            t.neg_more_popular.numpy(),
            t.fallback.numpy(),
            key,
            pop,
            cur.margin_at(0),
        )
        print(
            json.dumps(
                {
                    "bench": "reward_sampler",
                    "model": "dice",
                    "data": "amazon-beauty",
                    "n_users": n_users,
                    "n_items": n_items,
                    "n_positives": n,
                    "batch_size": batch_size,
                    "epochs": args.epochs,
                    "margin": args.margin,
                    "margin_decay": args.margin_decay,
                    "ours_triples_per_s": round(ours_rate),
                    "reference_triples_per_s": round(ref_rate),
                    "speedup_vs_reference": round(ours_rate / ref_rate, 1),
                    "triples_per_s": round(ours_rate),
                    "setup_s": round(statistics.median(setups), 4),
                    # CPU-time rates: less sensitive to other processes on a shared machine.
                    "ours_cpu_triples_per_s": round(count / statistics.median(cpu)),
                    "reference_cpu_triples_per_s": round(len(subset) / statistics.median(ref_cpu)),
                    "reference_samples": len(subset),
                    "repeats": args.repeats,
                    "threads": torch.get_num_threads(),
                    "cpus": os.cpu_count(),
                    "loadavg_1m": [round(load_start, 2), round(os.getloadavg()[0], 2)],
                    "check": {"ours": ours_check, "reference": ref_check},
                    "git": git_sha(),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
