"""One data-parallel rank for test_user_anchors.py (run as a script; imports only torch + parpo).

Usage: python parpo_anchor_dp_worker.py RANK INIT_FILE OUT_DIR
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from parpo.algorithms import AnchorStore, all_gather_user_batch_stats, broadcast_anchors

SHARDS = {
    0: ([0, 1, 0, 2], [0.1, 0.5, 0.3, 1.0]),
    1: ([1, 0, 2, 3, 3], [0.7, 0.8, 0.0, 0.2, 0.6]),
}
HISTORY = ([0, 1], [0.5, 0.5])
ALPHA = 0.25


def _upd(store: AnchorStore, users: list[int], rewards: list[float], **kw: object) -> None:
    store.update(torch.tensor(users), torch.tensor(rewards, dtype=torch.float64), **kw)


def main(rank: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        store = AnchorStore(alpha=ALPHA)
        _upd(store, *HISTORY)  # identical history on both ranks
        _upd(store, *SHARDS[rank], gather=all_gather_user_batch_stats)
        torch.save(store.state_dict(), f"{out_dir}/gathered{rank}.pt")
        # diverge on purpose, then make every rank a copy of rank 0
        _upd(store, [5 + rank], [float(rank)])
        broadcast_anchors(store, src=0)
        torch.save(store.state_dict(), f"{out_dir}/broadcast{rank}.pt")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
