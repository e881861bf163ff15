"""One stage-2 step's cost against the tables' size: whole tables composed every step, the rows
the step reads (``CausalEmbeddings.batch_tables``, what ``RewardModule`` uses on ``mf``) with
fused Adam over every row, and the rows read with sparse id-table gradients and ``LazyAdam``
(``train.optimizer: lazy_adam``, the ``dice`` preset).

Hybrid tables shaped like the synthetic worlds (per user 3 feature entries of 24, per item 4 of
~340: category, two attributes, price bucket; scalar conformity), a step of the 5M world's
shape (8,192 positive triples and ~66k impression triples: the users and items a step reads
are drawn from the split's own count), forward, backward and the optimiser step, one torch thread.
Prints one JSON line per table size and a summary line with each path's s per 1M triples at the
largest size over the smallest (issue 16 asks that ratio to stay within 1.5x).

    python benchmarks/reward_step_scale.py                      # 1M and 5M positives' tables
    python benchmarks/reward_step_scale.py --sizes 150000x40000 --steps 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reward_models.model import CausalEmbeddings  # noqa: E402
from reward_models.training.lazy_adam import LazyAdam, row_groups  # noqa: E402

TRIPLES = 8192 + 66_000  # a 5M-world step: 8,192 positives and their impressions
#: (name, compose the rows read only, sparse id gradients + LazyAdam)
PATHS = (("whole_tables", False, False), ("batch_rows", True, False), ("lazy_rows", True, True))


def features(n: int, per_row: int, n_feat: int, g: torch.Generator) -> torch.Tensor:
    rows = torch.arange(n).repeat_interleave(per_row)
    cols = torch.randint(0, n_feat, (n * per_row,), generator=g)
    return torch.sparse_coo_tensor(
        torch.stack([rows, cols]), torch.ones(n * per_row), (n, n_feat), check_invariants=False
    ).coalesce()


def model(users: int, items: int, g: torch.Generator, sparse_rows: bool) -> CausalEmbeddings:
    return CausalEmbeddings(
        users, items, 64, generator=g, sparse_rows=sparse_rows,
        user_features=features(users, 3, 24, g), item_features=features(items, 4, 340, g),
        item_buckets=torch.randint(0, 16, (items,), generator=g), n_buckets=16, fixed_levels=True,
    )  # fmt: skip


def step(m: CausalEmbeddings, opt: torch.optim.Optimizer, u, i, j, batch_rows: bool) -> float:
    t0 = time.perf_counter()
    if batch_rows:
        t, u_at, i_at = m.batch_tables(u, torch.cat([i, j]))
        s = m(u_at, i_at[: i.numel()], i_at[i.numel() :], tables=t)
    else:
        s = m(u, i, j, tables=m.tables())
    loss = -torch.nn.functional.logsigmoid(s.click).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return time.perf_counter() - t0


def measure(users: int, items: int, steps: int) -> dict[str, float | int | str]:
    g = torch.Generator().manual_seed(0)
    out: dict[str, float | int | str] = {"bench": "reward_step_scale", "users": users, "items": items}
    for name, batch_rows, lazy in PATHS:
        m = model(users, items, g, lazy)
        if lazy:
            opt: torch.optim.Optimizer = LazyAdam(row_groups(m.parameters(), [m.user, m.item]), lr=0.01)
        else:
            opt = torch.optim.Adam(m.parameters(), lr=0.01, fused=True)
        times = []
        for _ in range(steps + 1):  # the first step allocates Adam's state: not counted
            u = torch.randint(0, users, (TRIPLES,), generator=g)
            i, j = (torch.randint(0, items, (TRIPLES,), generator=g) for _ in range(2))
            times.append(step(m, opt, u, i, j, batch_rows))
        med = statistics.median(times[1:])
        out[f"{name}_s_per_step"] = round(med, 4)
        out[f"{name}_s_per_1m_triples"] = round(med * 1e6 / TRIPLES, 3)
    for name, _, _ in PATHS[1:]:
        out[f"{name}_speedup"] = round(
            float(out["whole_tables_s_per_step"]) / float(out[f"{name}_s_per_step"]), 2
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["150000x40000", "600000x160000"], help="USERSxITEMS")
    ap.add_argument("--steps", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for size in args.sizes:
        users, items = (int(x) for x in size.split("x"))
        rows.append(measure(users, items, args.steps))
        print(json.dumps(rows[-1]), flush=True)
    if len(rows) > 1:
        lo, hi = rows[0], rows[-1]
        ratio = {
            f"{k}_largest_over_smallest": round(
                float(hi[f"{k}_s_per_1m_triples"]) / float(lo[f"{k}_s_per_1m_triples"]), 2
            )
            for k, _, _ in PATHS
        }
        print(json.dumps({"bench": "reward_step_scale", "summary": True, **ratio}), flush=True)


if __name__ == "__main__":
    main()
