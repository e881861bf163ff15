"""Per-user preference anchors: an EMA of the mean and variance of each user's preference reward.

The store is dense, indexed by the user index shared through the id maps. The training loop
computes advantages with ``store.snapshot()`` (the *pre-update* anchors), then calls
``store.update(user, preference_reward)``. One update per user per call (batch):

    n_b, rbar, v_b = count, mean, population variance of the user's rewards in this batch
    a     = max(alpha, 1 / (c + 1))          # warm-up: the first 1/alpha updates are an equal-weight mean
    delta = rbar - mu
    mu   <- mu + a * delta
    var  <- (1 - a) * var + a * v_b + a * (1 - a) * delta**2
    c    <- c + 1

``var`` is the exact variance of the mixture ``(1 - a) * old + a * batch`` (with ``v_b = 0`` it is
the classic ``(1 - a) * (var + a * delta**2)`` EW variance). The first update (``a = 1``) sets
``mu = rbar``, ``var = v_b``. With ``warmup=False``, ``a = alpha`` after the first update.

Data parallel: with ``all_gather=True`` every rank all-gathers the per-user batch statistics
``(user, n, mean, M2)``, merges them exactly (Chan et al.) and applies the same update, so anchors
stay identical on all ranks given identical starting states (``broadcast_`` from rank 0 after a
load makes them so). Thread safety: one lock around every read and write.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from parpo_core.durable import atomic_write_with

if TYPE_CHECKING:
    from parpo.algorithms.config import AdvantageConfig

FORMAT_VERSION = 1
_META_KEY = b"parpo.anchors"


@dataclass(frozen=True, eq=False)
class AnchorSnapshot:
    """Immutable anchor tensors indexed by dense user index: ``mean``, ``var`` ``[U]`` float64,
    ``count`` ``[U]`` int64 (number of anchor updates; 0 for users never seen)."""

    mean: Tensor
    var: Tensor
    count: Tensor

    @classmethod
    def from_lists(cls, mean: Sequence[float], var: Sequence[float], count: Sequence[int]) -> AnchorSnapshot:
        return cls(
            torch.tensor(mean, dtype=torch.float64),
            torch.tensor(var, dtype=torch.float64),
            torch.tensor(count, dtype=torch.long),
        )

    def __len__(self) -> int:
        return int(self.count.numel())

    def to(self, device: torch.device | str) -> AnchorSnapshot:
        return AnchorSnapshot(self.mean.to(device), self.var.to(device), self.count.to(device))

    def lookup(self, user: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``mu``, ``var``, ``count`` ``[B]`` for user indices ``[B]``; users outside ``[0, U)`` get 0, 0, 0."""
        n = len(self)
        inside = (user >= 0) & (user < n)
        if n == 0:
            zf = torch.zeros(user.shape, dtype=torch.float64, device=user.device)
            return zf, zf.clone(), torch.zeros(user.shape, dtype=torch.long, device=user.device)
        idx = user.clamp(0, n - 1)
        mean, var, count = (t.to(user.device)[idx] for t in (self.mean, self.var, self.count))
        zero = torch.zeros((), dtype=torch.float64, device=user.device)
        return (
            torch.where(inside, mean, zero),
            torch.where(inside, var, zero),
            torch.where(inside, count, torch.zeros((), dtype=torch.long, device=user.device)),
        )


@dataclass(frozen=True, eq=False)
class UserBatchStats:
    """Per-user sufficient statistics of one batch, ``[K]`` each, users unique and sorted:
    ``n`` rewards, their ``mean`` and ``m2`` (sum of squared deviations from the mean)."""

    user: Tensor
    n: Tensor
    mean: Tensor
    m2: Tensor

    def as_matrix(self) -> Tensor:
        """``[K, 4]`` float64 ``(user, n, mean, m2)``, the wire format for all-gather."""
        return torch.stack([self.user.double(), self.n, self.mean, self.m2], dim=1)

    @classmethod
    def from_matrix(cls, m: Tensor) -> UserBatchStats:
        m = m.to("cpu", torch.float64)
        return cls(m[:, 0].round().long(), m[:, 1], m[:, 2], m[:, 3])


def user_batch_stats(user: Tensor, rewards: Tensor) -> UserBatchStats:
    """Per-user ``n``, ``mean``, ``m2`` of ``rewards`` ``[B]`` grouped by ``user`` ``[B]`` (vectorised)."""
    if user.shape != rewards.shape or user.ndim != 1:
        raise ValueError(
            f"user and rewards must both be [B], got {tuple(user.shape)} and {tuple(rewards.shape)}"
        )
    user, r = user.detach().to("cpu", torch.long), rewards.detach().to("cpu", torch.float64)
    uniq, inv = torch.unique(user, return_inverse=True)
    k = uniq.numel()
    n = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, torch.ones_like(r))
    mean = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, r) / n
    d = r - mean[inv]
    m2 = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, d * d)
    return UserBatchStats(uniq, n, mean, m2)


def merge_user_batch_stats(parts: Sequence[UserBatchStats]) -> UserBatchStats:
    """Exact merge of per-user statistics from several shards (Chan, Golub & LeVeque 1979):
    ``N = sum n_i``, ``mean = sum n_i mean_i / N``, ``M2 = sum (m2_i + n_i (mean_i - mean)^2)``."""
    parts = [p for p in parts if p.user.numel()]
    if not parts:
        e = torch.zeros(0, dtype=torch.float64)
        return UserBatchStats(torch.zeros(0, dtype=torch.long), e, e.clone(), e.clone())
    user = torch.cat([p.user for p in parts])
    n = torch.cat([p.n for p in parts])
    mean = torch.cat([p.mean for p in parts])
    m2 = torch.cat([p.m2 for p in parts])
    uniq, inv = torch.unique(user, return_inverse=True)
    k = uniq.numel()
    big_n = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, n)
    big_mean = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, n * mean) / big_n
    d = mean - big_mean[inv]
    big_m2 = torch.zeros(k, dtype=torch.float64).index_add_(0, inv, m2 + n * d * d)
    return UserBatchStats(uniq, big_n, big_mean, big_m2)


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


class AnchorStore:
    """Thread-safe per-user EMA of preference-reward mean and variance (see the module docstring).

    ``alpha``: EMA rate; ``warmup``: use ``max(alpha, 1 / (c + 1))`` so early anchors are plain means.
    """

    def __init__(self, alpha: float = 0.1, *, warmup: bool = True) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = float(alpha)
        self.warmup = bool(warmup)
        self._lock = threading.RLock()
        self._mean = torch.zeros(0, dtype=torch.float64)
        self._var = torch.zeros(0, dtype=torch.float64)
        self._count = torch.zeros(0, dtype=torch.long)
        self._n_obs = torch.zeros(0, dtype=torch.long)
        self._size = 0  # max user index seen + 1; the tensors above may have spare capacity

    @classmethod
    def from_config(cls, cfg: AdvantageConfig) -> AnchorStore:
        """A store with ``alpha = cfg.anchor_alpha``."""
        return cls(alpha=cfg.anchor_alpha)

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        """Number of users with at least one update."""
        with self._lock:
            return int((self._count > 0).sum())

    def snapshot(self) -> AnchorSnapshot:
        """A copy of the current anchors (``[U]`` tensors), safe to use while others update."""
        with self._lock:
            n = self._size
            return AnchorSnapshot(self._mean[:n].clone(), self._var[:n].clone(), self._count[:n].clone())

    def n_obs(self) -> Tensor:
        """``[U]`` int64: rewards seen per user (for reports; the EMA uses update counts)."""
        with self._lock:
            return self._n_obs[: self._size].clone()

    # ------------------------------------------------------------------ writing

    def _grow(self, size: int) -> None:
        self._size = max(self._size, size)
        old = self._mean.numel()
        if size <= old:
            return
        cap = max(size, 2 * old)
        pad = cap - old
        self._mean = torch.cat([self._mean, torch.zeros(pad, dtype=torch.float64)])
        self._var = torch.cat([self._var, torch.zeros(pad, dtype=torch.float64)])
        self._count = torch.cat([self._count, torch.zeros(pad, dtype=torch.long)])
        self._n_obs = torch.cat([self._n_obs, torch.zeros(pad, dtype=torch.long)])

    def update(
        self, user: Tensor, rewards: Tensor, *, all_gather: bool = False, process_group: Any = None
    ) -> dict[str, float]:
        """Fold one batch of preference rewards ``[B]`` of users ``[B]`` into the anchors.

        Call *after* computing advantages with the pre-update ``snapshot()``. With ``all_gather``,
        statistics from every rank of ``process_group`` are merged first (collective call).
        Returns metrics: ``anchors/users`` (users with history), ``anchors/updated``, ``anchors/new``.
        """
        stats = user_batch_stats(user, rewards)
        if all_gather:
            stats = all_gather_user_batch_stats(stats, process_group)
        return self.apply(stats)

    def apply(self, stats: UserBatchStats) -> dict[str, float]:
        """Apply already-merged per-user batch statistics (one EMA step per listed user)."""
        if stats.user.numel() and int(stats.user.min()) < 0:
            raise ValueError("user indices must be >= 0")
        if torch.unique(stats.user).numel() != stats.user.numel():
            raise ValueError("apply() needs one row per user: merge shards with merge_user_batch_stats first")
        with self._lock:
            if stats.user.numel():
                self._grow(int(stats.user.max()) + 1)
            u = stats.user
            c = self._count[u]
            a = torch.full(c.shape, self.alpha, dtype=torch.float64)
            first = 1.0 / (c.double() + 1.0)
            a = torch.maximum(a, first) if self.warmup else torch.where(c == 0, torch.ones_like(a), a)
            batch_var = stats.m2 / stats.n
            delta = stats.mean - self._mean[u]
            self._var[u] = (1 - a) * self._var[u] + a * batch_var + a * (1 - a) * delta * delta
            self._mean[u] = self._mean[u] + a * delta
            self._count[u] = c + 1
            self._n_obs[u] = self._n_obs[u] + stats.n.round().long()
            return {
                "anchors/users": float((self._count > 0).sum()),
                "anchors/updated": float(u.numel()),
                "anchors/new": float((c == 0).sum()),
            }

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """Tensors and settings for a checkpoint (only users with history are kept)."""
        with self._lock:
            seen = torch.nonzero(self._count > 0).flatten()
            return {
                "format_version": FORMAT_VERSION,
                "alpha": self.alpha,
                "warmup": self.warmup,
                "user": seen.clone(),
                "mean": self._mean[seen].clone(),
                "var": self._var[seen].clone(),
                "count": self._count[seen].clone(),
                "n_obs": self._n_obs[seen].clone(),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state.get("format_version", FORMAT_VERSION)) > FORMAT_VERSION:
            raise ValueError(f"anchor state format {state['format_version']} is newer than {FORMAT_VERSION}")
        user = torch.as_tensor(state["user"], dtype=torch.long)
        size = int(user.max()) + 1 if user.numel() else 0
        with self._lock:
            self.alpha, self.warmup = float(state["alpha"]), bool(state["warmup"])
            self._mean = torch.zeros(size, dtype=torch.float64).index_copy_(
                0, user, torch.as_tensor(state["mean"], dtype=torch.float64)
            )
            self._var = torch.zeros(size, dtype=torch.float64).index_copy_(
                0, user, torch.as_tensor(state["var"], dtype=torch.float64)
            )
            self._count = torch.zeros(size, dtype=torch.long).index_copy_(
                0, user, torch.as_tensor(state["count"], dtype=torch.long)
            )
            self._n_obs = torch.zeros(size, dtype=torch.long).index_copy_(
                0, user, torch.as_tensor(state["n_obs"], dtype=torch.long)
            )
            self._size = size

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the anchors to a parquet file atomically (temp file + fsync + ``os.replace``)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = Path(path)
        st = self.state_dict()
        table = pa.table(
            {k: pa.array(st[k].numpy()) for k in ("user", "mean", "var", "count", "n_obs")}
        ).replace_schema_metadata(
            {
                _META_KEY: json.dumps(
                    {"format_version": FORMAT_VERSION, "alpha": st["alpha"], "warmup": st["warmup"]}
                )
            }
        )
        return atomic_write_with(path, lambda tmp: pq.write_table(table, tmp))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> AnchorStore:
        """Read a store written by ``save``."""
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        meta = json.loads((table.schema.metadata or {}).get(_META_KEY, b"{}"))
        if not meta:
            raise ValueError(f"{path}: not a PARPO anchor file (missing {_META_KEY.decode()!r} metadata)")
        cols = {
            k: torch.from_numpy(table.column(k).to_numpy().copy())
            for k in ("user", "mean", "var", "count", "n_obs")
        }
        store = cls(alpha=meta["alpha"], warmup=meta["warmup"])
        store.load_state_dict({**meta, **cols})
        return store

    def broadcast_(self, src: int = 0, process_group: Any = None) -> None:
        """Replace this rank's anchors with rank ``src``'s (collective: call on every rank)."""
        import torch.distributed as dist

        device = _comm_device(process_group)
        with self._lock:
            st = self.state_dict()
            mat = torch.stack(
                [st["user"].double(), st["mean"], st["var"], st["count"].double(), st["n_obs"].double()],
                dim=1,
            ).to(device)
            header = torch.tensor(
                [mat.shape[0], self.alpha, float(self.warmup)], dtype=torch.float64, device=device
            )
            dist.broadcast(header, src=src, group=process_group)
            k = int(header[0].item())
            buf = mat if mat.shape[0] == k else torch.zeros((k, 5), dtype=torch.float64, device=device)
            dist.broadcast(buf, src=src, group=process_group)
            buf = buf.cpu()
            self.load_state_dict(
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
