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

Data parallel (``anchor_sync``): every rank all-gathers the per-user batch statistics
``(user, n, mean, M2)``, merges them exactly (Chan et al.) and applies the same update, so anchors
stay identical on all ranks given identical starting states (``broadcast_anchors`` from rank 0
after a load makes them so). Files: ``anchor_io``. Thread safety: one lock around every read and
write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

if TYPE_CHECKING:
    from parpo.algorithms.config import AdvantageConfig

#: Version of the state layout (``state_dict``, and the anchor file written from it).
FORMAT_VERSION = 1


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
        self,
        user: Tensor,
        rewards: Tensor,
        *,
        gather: Callable[[UserBatchStats], UserBatchStats] | None = None,
    ) -> dict[str, float]:
        """Fold one batch of preference rewards ``[B]`` of users ``[B]`` into the anchors.

        Call *after* computing advantages with the pre-update ``snapshot()``. ``gather`` merges
        the statistics of every rank first (data parallel: ``anchor_sync.all_gather_user_batch_stats``,
        a collective call). Returns metrics: ``anchors/users`` (users with history),
        ``anchors/updated``, ``anchors/new``.
        """
        stats = user_batch_stats(user, rewards)
        if gather is not None:
            stats = gather(stats)
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
