"""Anchors under data parallelism: all-gather and merge per-user batch statistics (so every rank
applies the same update), and broadcast a whole store from one rank."""

from __future__ import annotations

from typing import Any

import torch

from parpo.algorithms.anchors import AnchorStore, UserBatchStats, merge_user_batch_stats


def _comm_device(process_group: Any) -> torch.device:
    import torch.distributed as dist

    if dist.get_backend(process_group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_gather_user_batch_stats(stats: UserBatchStats, process_group: Any = None) -> UserBatchStats:
    """All-gather per-user statistics from every rank of ``process_group`` (default: the world, which
    is also Lightning Fabric's) and merge them. Collective: call on every rank."""
    import torch.distributed as dist

    device = _comm_device(process_group)
    world = dist.get_world_size(process_group)
    local = stats.as_matrix().to(device)
    size = torch.tensor([local.shape[0]], dtype=torch.long, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=process_group)
    max_k = int(max(int(s.item()) for s in sizes))
    padded = torch.zeros((max_k, 4), dtype=torch.float64, device=device)
    padded[: local.shape[0]] = local
    out = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(out, padded, group=process_group)
    parts = [UserBatchStats.from_matrix(o[: int(s.item())]) for o, s in zip(out, sizes, strict=True)]
    return merge_user_batch_stats(parts)


def broadcast_anchors(store: AnchorStore, src: int = 0, process_group: Any = None) -> None:
    """Replace this rank's anchors with rank ``src``'s (collective: call on every rank, at a point
    where no rank updates its store)."""
    import torch.distributed as dist

    device = _comm_device(process_group)
    st = store.state_dict()
    mat = torch.stack(
        [st["user"].double(), st["mean"], st["var"], st["count"].double(), st["n_obs"].double()],
        dim=1,
    ).to(device)
    header = torch.tensor(
        [mat.shape[0], store.alpha, float(store.warmup)], dtype=torch.float64, device=device
    )
    dist.broadcast(header, src=src, group=process_group)
    k = int(header[0].item())
    buf = mat if mat.shape[0] == k else torch.zeros((k, 5), dtype=torch.float64, device=device)
    dist.broadcast(buf, src=src, group=process_group)
    buf = buf.cpu()
    store.load_state_dict(
        {
            "alpha": float(header[1]),
            "warmup": bool(header[2] > 0.5),
            "user": buf[:, 0].round().long(),
            "mean": buf[:, 1],
            "var": buf[:, 2],
            "count": buf[:, 3].round().long(),
            "n_obs": buf[:, 4].round().long(),
        }
    )
