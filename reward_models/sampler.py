"""Popularity-aware negative sampling with a margin (DICE, Zheng et al., WWW 2021), vectorised in torch.

For every positive ``(u, i)`` the sampler draws a negative ``j`` that is not
one of the user's train positives, from one of two popularity sides:

- *more popular*: ``pop[j] > pop[i] + margin``. The user chose the less popular
  ``i`` over ``j``: evidence of interest (the interest BPR applies), and the
  conformity ordering is ``j > i``.
- *less popular*: ``pop[j] < pop[i] - margin``. Interest and conformity both
  explain ``i > j``: only the conformity ordering ``i > j`` is used.

``pop`` is the true train count of each item and ``margin`` an absolute margin
on those counts (DICE decays it by a factor each epoch: ``reward_models.curriculum``).
Per positive, a coin picks the more popular side with probability ``p_more``
(DICE: 0.5); a side without any non-positive candidate is never used, the other
one is; when both are empty the negative is drawn uniformly from all the user's
non-positives and the triple is flagged ``fallback`` (a model may skip its
cause-specific losses). ``neg_more_popular`` always equals ``pop[neg] >
pop[pos]`` on the counts (by construction on the two sides, compared for
fallbacks, where ties give False).

Differences from the DICE code: its less popular side is ``pop < pop[i] / 2``
(here ``pop[i] - margin``, as in the paper); it prefers a side with at least
``pool`` (40) candidates and crashes when both are short (here any non-empty
side, and a flagged fallback); one negative per positive.

Vectorised (no Python loop over samples): items are sorted by popularity once
(``order``, ``sorted_pop``), so a side is a contiguous range of popularity
ranks; the ranges of every item for a margin come from two ``searchsorted``
calls (``side_plan``, cached per margin). A draw is a uniform rank in the
chosen range. The user's positives are a sorted int64 key ``user * n_items +
rank``; collisions are found in bulk (a hashed bool filter, ~4% false hits,
confirmed by ``searchsorted`` on the key) and only the colliding triples are
redrawn, for at most ``max_rounds`` rounds. The few left after that (a side
crowded with the user's positives) are settled exactly: the user's positives
on each side are counted, a side left empty is swapped for the other (or the
fallback), and the k-th non-positive rank of the range is computed without
rejection (``_kth_free``). So a negative is never a train positive of its user,
and every draw is uniform over the chosen side's non-positive items.

All randomness comes from the ``torch.Generator`` given at construction: the
same seed gives the same triples, and ``generator.get_state()`` /
``set_state()`` resume the stream exactly at the granularity of ``sample``
calls and whole ``epoch`` iterators. Tensors live on the CPU; move batches to
the model's device.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Literal, NamedTuple

import torch
from torch import Tensor

__all__ = ["PopularityNegativeSampler", "SidePlan", "Triples", "popularity_weights"]

# One 62-bit draw per triple: the side coin from the low 31 bits, the position in the range from the high 31.
_COIN_BITS = 31


@dataclass(frozen=True)
class Triples:
    """A batch of ``B`` (user, positive, negative) triples.

    user, pos, neg: [B] int64 dense indices. neg_more_popular: [B] bool,
    ``pop[neg] > pop[pos]`` on the true train counts. fallback: [B] bool, no
    candidate on either side of the margin (uniform negative). pos_weight: [B]
    float32 weight of the positive (from the positives rule). int_weight,
    con_weight: [B] float32 popularity re-weighting of the interest and
    conformity branches (all ones unless ``reweight_alpha`` is set).
    """

    user: Tensor
    pos: Tensor
    neg: Tensor
    neg_more_popular: Tensor
    fallback: Tensor
    pos_weight: Tensor
    int_weight: Tensor
    con_weight: Tensor

    def __len__(self) -> int:
        return int(self.user.shape[0])


def popularity_weights(
    pop: Tensor, pos_items: Tensor, mode: Literal["interest", "conformity"], alpha: float = 1.0
) -> Tensor:
    """Per-triple weights [B] float32 from the popularity of the positive item.

    pop: [n_items] train counts (clamped to at least 1); pos_items: [B] int64.
    ``interest``: ``w = (max(pop) / pop[i]) ** alpha`` up-weights rare positives;
    ``conformity``: ``w = (pop[i] / max(pop)) ** alpha`` up-weights popular ones.
    Both are divided by their mean over ``pos_items``, so pass every train
    positive to get weights whose mean over an epoch is 1. ``alpha = 0`` gives
    all ones (re-weighting off).
    """
    if mode not in ("interest", "conformity"):
        raise ValueError(f"popularity_weights: unknown mode {mode!r} (use 'interest' or 'conformity')")
    p = pop.to(torch.float64).clamp(min=1.0)
    ratio = p[pos_items] / p.max()
    w = ratio.pow(-alpha if mode == "interest" else alpha)
    return (w / w.mean()).to(torch.float32) if w.numel() else w.to(torch.float32)


class SidePlan(NamedTuple):
    """Where positives of each item draw from, for one margin.

    Popularity-rank space: the less popular side is [0, lo_end), the more popular
    one [hi_start, n_items). lo_end, hi_start, fallback: [n_items]; fallback means
    both sides are empty. start, width, more: [n_items * 2], row ``2 * item +
    coin`` (coin 1: the more popular side was drawn), the range to draw from and
    whether it is the more popular side; an empty side is replaced by the other
    one, and both by the whole catalogue for a fallback.
    """

    lo_end: Tensor
    hi_start: Tensor
    fallback: Tensor
    start: Tensor
    width: Tensor
    more: Tensor


class PopularityNegativeSampler:
    """DICE negative sampler over ``N`` train positives (see the module docstring).

    user, item: [N] int64 dense indices of the positives (duplicates allowed:
    each row is one positive). popularity: [n_items] true train counts, counted
    from ``item`` when None. weight: [N] per-positive weight from the positives
    rule (ones when None). generator: the only source of randomness. p_more:
    probability of the more popular side when both have a candidate.
    max_rounds: bulk rejection rounds before the exact draw. reweight_alpha:
    exponent of ``popularity_weights`` for ``int_weight``/``con_weight`` (0 =
    off). chunk_size: positives sampled per call inside ``epoch``.
    """

    def __init__(
        self,
        user: Tensor,
        item: Tensor,
        n_users: int,
        n_items: int,
        popularity: Tensor | None = None,
        weight: Tensor | None = None,
        *,
        generator: torch.Generator,
        p_more: float = 0.5,
        max_rounds: int = 4,
        reweight_alpha: float = 0.0,
        chunk_size: int = 65536,
    ) -> None:
        user, item = user.to(torch.int64).reshape(-1), item.to(torch.int64).reshape(-1)
        n = user.shape[0]
        if item.shape[0] != n:
            raise ValueError(f"sampler: user and item lengths differ ({n} != {item.shape[0]})")
        if n == 0:
            raise ValueError("sampler: no positives to sample from")
        if int(user.min()) < 0 or int(user.max()) >= n_users:
            raise ValueError(f"sampler: user index outside [0, {n_users})")
        if int(item.min()) < 0 or int(item.max()) >= n_items:
            raise ValueError(f"sampler: item index outside [0, {n_items})")
        if (n_users + 1) * (n_items + 1) * 64 >= 2**63 or n_items >= 2**_COIN_BITS:
            raise ValueError(f"sampler: {n_users} users x {n_items} items overflow the int64 keys")
        if not 0.0 <= p_more <= 1.0:
            raise ValueError(f"sampler: p_more={p_more} is not a probability")
        if max_rounds < 0 or chunk_size < 1:
            raise ValueError("sampler: chunk_size must be >= 1 and max_rounds >= 0")
        if popularity is None:
            popularity = torch.bincount(item, minlength=n_items)
        if popularity.shape != (n_items,):
            raise ValueError(
                f"sampler: popularity has shape {tuple(popularity.shape)}, expected ({n_items},)"
            )
        if not bool(torch.isfinite(popularity.to(torch.float64)).all()):
            raise ValueError("sampler: popularity has a non-finite value")
        if weight is None:
            weight = torch.ones(n, dtype=torch.float32)
        if weight.shape != (n,):
            raise ValueError(f"sampler: weight has shape {tuple(weight.shape)}, expected ({n},)")

        self.user, self.item, self.n_users, self.n_items = user, item, n_users, n_items
        self.weight = weight.to(torch.float32)
        self.generator, self.p_more = generator, p_more
        self.max_rounds, self.chunk_size = max_rounds, chunk_size
        self._coin = round(p_more * 2**_COIN_BITS)
        # float64 thresholds are exact for integer counts and also allow real-valued popularity.
        self.pop = popularity.to(torch.float64)
        self.sorted_pop, self.order = torch.sort(self.pop, stable=True)
        self.rank = torch.empty_like(self.order)
        self.rank[self.order] = torch.arange(n_items)

        # The user's positives as sorted unique keys user * n_items + rank: a segment per user.
        self.key = torch.unique(user * n_items + self.rank[item])
        key_user = self.key // n_items
        self.offsets = torch.searchsorted(self.key, torch.arange(n_users + 1) * n_items)  # [n_users + 1]
        self.degree = self.offsets[1:] - self.offsets[:-1]
        if bool((self.degree >= n_items).any()):
            raise ValueError("sampler: a user interacted with every item, so no negative exists for them")
        # rank - index in the user's segment is non-decreasing in a segment: sorted key for _kth_free.
        local = torch.arange(self.key.shape[0]) - self.offsets[key_user]
        self.gap_key = key_user * (n_items + 1) + (self.key % n_items) - local
        # Membership prefilter: a bool table of 16 to 32 slots per positive (~4% false hits).
        self.hash_bits = (16 * self.key.shape[0]).bit_length()
        self.filter = torch.zeros(1 << self.hash_bits, dtype=torch.bool)
        self.filter[self._hash(self.key)] = True

        self.int_weight = popularity_weights(self.pop, item, "interest", reweight_alpha)
        self.con_weight = popularity_weights(self.pop, item, "conformity", reweight_alpha)
        self._plan: tuple[float, SidePlan] | None = None

    def __len__(self) -> int:
        return int(self.user.shape[0])

    # ------------------------------------------------------------------ sampling

    def sample(self, batch_index: Tensor | None = None, *, margin: float) -> Triples:
        """Triples for the positives ``batch_index`` [B] (all ``N``, in order, when None)."""
        idx = torch.arange(len(self)) if batch_index is None else batch_index.to(torch.int64).reshape(-1)
        plan = self.side_plan(margin)
        u, i = _take(self.user, idx), _take(self.item, idx)
        x = self._bits(idx.shape)
        want_more = (x & (2**_COIN_BITS - 1)) < self._coin
        row = (i << 1) + want_more
        start, width, more = _take(plan.start, row), _take(plan.width, row), _take(plan.more, row)
        fallback = _take(plan.fallback, i)

        # Bulk rejection: draw for all, redraw only the triples that hit a positive of their user.
        r = start + (((x >> _COIN_BITS) * width) >> _COIN_BITS)
        todo = self._collisions(u, r)
        for _ in range(self.max_rounds):
            if todo.numel() == 0:
                break
            r[todo] = _take(start, todo) + self._uniform_below(_take(width, todo))
            todo = todo[self._collisions(_take(u, todo), _take(r, todo))]
        if todo.numel():
            self._settle(
                plan, todo, _take(u, todo), _take(i, todo), _take(want_more, todo), r, more, fallback
            )
        neg = _take(self.order, r)

        # A more-popular-side negative has pop > pop[pos] + margin, a less-popular-side one
        # pop < pop[pos] - margin: only fallbacks need the comparison on the counts.
        neg_more_popular = more
        if bool(fallback.any()):
            fb = fallback.nonzero().squeeze(1)
            neg_more_popular[fb] = _take(self.pop, _take(neg, fb)) > _take(self.pop, _take(i, fb))
        return Triples(
            user=u,
            pos=i,
            neg=neg,
            neg_more_popular=neg_more_popular,
            fallback=fallback,
            pos_weight=_take(self.weight, idx),
            int_weight=_take(self.int_weight, idx),
            con_weight=_take(self.con_weight, idx),
        )

    def epoch(self, margin: float, batch_size: int, *, drop_last: bool = False) -> Iterator[Triples]:
        """Batches of ``batch_size`` triples over a fresh permutation of all positives.

        The permutation is drawn from the generator when this is called; the
        negatives are drawn ``chunk_size`` positives at a time (rounded to whole
        batches) and handed out as slices, which amortises the per-call
        overhead when batches are small.
        """
        if batch_size < 1:
            raise ValueError(f"sampler: batch_size={batch_size} must be >= 1")
        perm = torch.randperm(len(self), generator=self.generator)
        if drop_last:
            perm = perm[: len(perm) - len(perm) % batch_size]
        return self._batches(perm, margin, batch_size)

    def _batches(self, perm: Tensor, margin: float, batch_size: int) -> Iterator[Triples]:
        chunk = max(1, self.chunk_size // batch_size) * batch_size
        for c in range(0, len(perm), chunk):
            t = self.sample(perm[c : c + chunk], margin=margin)
            for s in range(0, len(t), batch_size):
                yield Triples(*(getattr(t, f.name)[s : s + batch_size] for f in fields(Triples)))

    def side_plan(self, margin: float) -> SidePlan:
        """The side ranges of every item for ``margin`` (cached for the last margin: an epoch uses one)."""
        if not margin >= 0:
            raise ValueError(f"sampler: margin={margin} must be >= 0")
        if self._plan is not None and self._plan[0] == margin:
            return self._plan[1]
        n = self.n_items
        lo_end = torch.searchsorted(self.sorted_pop, self.pop - margin, right=False)
        hi_start = torch.searchsorted(self.sorted_pop, self.pop + margin, right=True)
        ok_lo, ok_hi = lo_end > 0, hi_start < n
        fallback = ~(ok_lo | ok_hi)
        lo_width = torch.where(fallback, n, lo_end)  # the fallback range is the whole catalogue
        hi_only = ok_hi & ~ok_lo
        # Row 2 * item + coin; coin 0 takes the less popular side unless only the other is non-empty.
        start = torch.stack([torch.where(hi_only, hi_start, 0), torch.where(ok_hi, hi_start, 0)], 1)
        width = torch.stack(
            [torch.where(hi_only, n - hi_start, lo_width), torch.where(ok_hi, n - hi_start, lo_width)], 1
        )
        more = torch.stack([hi_only, ok_hi], 1)
        plan = SidePlan(lo_end, hi_start, fallback, start.reshape(-1), width.reshape(-1), more.reshape(-1))
        self._plan = (margin, plan)
        return plan

    # ------------------------------------------------------------------ helpers

    def _settle(
        self,
        plan: SidePlan,
        todo: Tensor,
        u: Tensor,
        i: Tensor,
        want_more: Tensor,
        r: Tensor,
        more: Tensor,
        fallback: Tensor,
    ) -> None:
        """Draw exactly for the triples ``todo`` still on a user positive after the rejection rounds.

        Counts the user's positives on each side, so a side left without a
        candidate gives way to the other (or to the fallback), then draws the
        k-th non-positive rank of the range uniformly. Writes into r, more and
        fallback at ``todo``.
        """
        n = self.n_items
        lo_end, hi_start = _take(plan.lo_end, i), _take(plan.hi_start, i)
        deg = _take(self.degree, u)
        free_lo = lo_end - self._positives_below(u, lo_end)
        free_hi = (n - hi_start) - (deg - self._positives_below(u, hi_start))
        ok_lo, ok_hi = free_lo > 0, free_hi > 0
        m = ok_hi & (want_more | ~ok_lo)
        less = ok_lo & ~m
        free = torch.where(m, free_hi, torch.where(less, free_lo, n - deg))
        r[todo] = self._kth_free(u, torch.where(m, hi_start, 0), self._uniform_below(free))
        more[todo] = m
        fallback[todo] = ~(m | less)

    def _bits(self, shape: torch.Size) -> Tensor:
        return torch.randint(0, 2 ** (2 * _COIN_BITS), shape, generator=self.generator)

    def _uniform_below(self, width: Tensor) -> Tensor:
        """Uniform integers in [0, width) (width >= 1) by multiply-shift; bias <= width / 2**31."""
        return ((self._bits(width.shape) >> _COIN_BITS) * width) >> _COIN_BITS

    def _hash(self, q: Tensor) -> Tensor:
        return (q ^ (q >> self.hash_bits)) & ((1 << self.hash_bits) - 1)

    def _collisions(self, u: Tensor, rank: Tensor) -> Tensor:
        """Indices into the batch where popularity rank ``rank`` [B] is a train positive of user ``u`` [B].

        The filter clears most queries with one lookup (a second hash would cost
        more than it saves); the rest are confirmed by ``searchsorted`` on the
        sorted key.
        """
        q = u * self.n_items + rank
        maybe = _take(self.filter, self._hash(q)).nonzero().squeeze(1)
        if maybe.numel() == 0:
            return maybe
        qm = _take(q, maybe)
        at = torch.searchsorted(self.key, qm).clamp(max=self.key.shape[0] - 1)
        return maybe[_take(self.key, at) == qm]

    def _positives_below(self, u: Tensor, bound: Tensor) -> Tensor:
        """[B] number of the user's positives with popularity rank < ``bound``."""
        return torch.searchsorted(self.key, u * self.n_items + bound) - _take(self.offsets, u)

    def _kth_free(self, u: Tensor, a: Tensor, k: Tensor) -> Tensor:
        """The ``k``-th (0-based) rank ``>= a`` that is not a positive of ``u``, without rejection.

        With the user's positive ranks ``R_s < R_{s+1} < ...`` from the first one
        ``>= a``, the answer is ``a + k + #{m : R_{s+m} - a - m <= k}``; as
        ``R - (index in segment)`` is non-decreasing (``gap_key``), the count is
        one ``searchsorted`` on it; every entry before ``s`` (earlier users, and
        this user's ranks below ``a``) is counted too, hence the ``- s``.
        """
        s = torch.searchsorted(self.key, u * self.n_items + a)
        target = u * (self.n_items + 1) + (k + a - (s - _take(self.offsets, u)))
        return a + k + (torch.searchsorted(self.gap_key, target, right=True) - s)


def _take(x: Tensor, index: Tensor) -> Tensor:
    # index_select is several times faster than advanced indexing for 1-D gathers on CPU.
    return x.index_select(0, index)
