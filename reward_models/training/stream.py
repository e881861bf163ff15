"""The stream of training triples one rank sees: drawn globally, then sharded.

Every rank holds the same ``PopularityNegativeSampler`` with a generator
seeded from the same global seed, so every rank draws the *same* global batch
of ``batch_size`` triples; rank ``r`` of ``R`` keeps the ``r``-th of ``R``
near-equal contiguous shards. The ranks thus see disjoint shards whose union
is exactly what a one-process run with the same global batch sees, and the
loss divides its sums by ``len(global batch) / R`` so DDP's gradient average
equals the one-process gradient.

Exact resume: the state is (epoch, batches consumed in it, the generator state
at the epoch's start). Restoring replays the epoch's permutation and skips the
consumed batches, so the next batch is the one an uninterrupted run would see.
The dCor subsample of each batch comes from a generator seeded by (seed, epoch,
batch): the same on every rank and after a resume.

With ``impressions`` (``reward_models.exposure``), every global batch also carries its slice
of the epoch's impression triples (drawn from the sampler's generator right after its
permutation, so a resume replays them too), appended after the sampled triples.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from reward_models.curriculum import Curriculum
from reward_models.exposure import ImpressionTriples
from reward_models.sampler import PopularityNegativeSampler, Triples

FIELDS = ("user", "pos", "neg", "neg_more_popular", "fallback", "pos_weight", "int_weight", "con_weight")


def _subsample(x: Tensor, size: int, n: int, g: torch.Generator) -> Tensor:
    """``n`` random distinct values of x (indices below ``size``), all of them when fewer."""
    present = torch.zeros(size, dtype=torch.bool)
    present[x] = True  # sorted distinct values without torch.unique's sort of the whole batch
    u = present.nonzero().squeeze(1)
    return u if u.shape[0] <= n else u[torch.randperm(u.shape[0], generator=g)[:n]]


class TripleStream:
    """Iterable of per-rank batches (dicts of tensors), one pass over the train positives per epoch.

    Each batch: ``user, pos, neg`` [b] int64, ``neg_more_popular, fallback`` [b] bool,
    ``pos_weight, int_weight, con_weight`` [b] float32 (this rank's shard of the global
    batch); ``sub_user, sub_item`` [<= dcor_sample] int64 (subsample of the *global*
    batch's distinct users and items, absent when ``dcor_sample == 0``); ``click_weight`` [b]
    float32 (with ``click_correction``, see ``_click_weight``); ``exposed`` [b] bool (impression
    triples flagged by ``exposure.interest=exposed``: False for sampled ones); ``norm``
    (len(global batch) / ranks), ``epoch``, ``index``, ``margin`` (python numbers).
    """

    def __init__(
        self,
        sampler: PopularityNegativeSampler,
        curriculum: Curriculum,
        batch_size: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world: int = 1,
        dcor_sample: int = 0,
        click_correction: bool = False,
        impressions: ImpressionTriples | None = None,
    ) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in [0, {world})")
        self.sampler, self.curriculum, self.batch_size = sampler, curriculum, batch_size
        self.seed, self.rank, self.world, self.dcor_sample = seed, rank, world, dcor_sample
        self.click_correction, self.impressions = click_correction, impressions
        self._weights: tuple[float, tuple[Tensor, Tensor]] | None = None
        self.epoch = 0  # the epoch the next __iter__ draws
        self._start: dict[int, Tensor] = {0: sampler.generator.get_state()}
        self._skip = 0
        self._consumed = (0, 0)  # (epoch, batches) trained so far in that epoch

    def __len__(self) -> int:
        return math.ceil(len(self.sampler) / self.batch_size)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        epoch, skip = self.epoch, self._skip
        self.sampler.generator.set_state(self._start[epoch])
        self._skip = 0
        margin = self.curriculum.margin_at(epoch)
        last = len(self) - 1
        batches = self.sampler.epoch(margin, self.batch_size)  # draws the permutation now
        imp = self.impressions.epoch(len(self), self.sampler.generator) if self.impressions else None
        for b, triples in enumerate(batches):
            if b == last:
                # The sampler draws nothing after the last batch. Loaders that know len() never
                # ask for StopIteration, so the epoch is closed here, before the last yield.
                self._close(epoch)
            if b >= skip:
                yield self._batch(triples, epoch, b, margin, imp[b] if imp is not None else None)
        self._close(epoch)

    def _close(self, epoch: int) -> None:
        if self.epoch == epoch:
            self.epoch = epoch + 1
            self._start = {epoch: self._start[epoch], epoch + 1: self.sampler.generator.get_state()}

    def _batch(
        self, t: Triples, epoch: int, index: int, margin: float, imp: dict[str, Tensor] | None = None
    ) -> dict[str, Any]:
        full: dict[str, Tensor] = {k: getattr(t, k) for k in FIELDS}
        if self.click_correction:
            full["click_weight"] = self._click_weight(t, margin)
        if imp is not None:  # a field only the impressions carry: neutral (False, 1.0) for sampled triples
            n_s = len(t)
            for k, v in imp.items():
                if k not in full:
                    full[k] = torch.zeros(n_s, dtype=v.dtype) if v.dtype == torch.bool else torch.ones(n_s)
            full = {k: torch.cat([v, imp[k]]) for k, v in full.items()}
        n = int(full["user"].shape[0])
        lo, hi = (n * self.rank) // self.world, (n * (self.rank + 1)) // self.world
        out: dict[str, Any] = {k: v[lo:hi] for k, v in full.items()}
        if self.dcor_sample > 0:
            g = torch.Generator().manual_seed(
                ((self.seed * 1_000_003 + epoch) * 1_000_003 + index) % (1 << 63)
            )
            out["sub_user"] = _subsample(full["user"], self.sampler.n_users, self.dcor_sample, g)
            items = torch.cat([full["pos"], full["neg"]])
            out["sub_item"] = _subsample(items, self.sampler.n_items, self.dcor_sample, g)
        out |= {"norm": n / self.world, "epoch": epoch, "index": index, "margin": margin}
        return out

    def _click_weight(self, t: Triples, margin: float) -> Tensor:
        """Importance weights [B] that turn the sampler's side choice back into uniform negatives.

        Uniform negatives (ignoring the user's own positives) fall on the more popular side
        with q = n_more / (n_more + n_less), where n_more = #{j: pop_j > pop_i + margin} and
        n_less = #{j: pop_j < pop_i - margin}; the sampler picks that side with p_more
        when both are non-empty. w = q / p_more (more) or (1 - q) / (1 - p_more) (less):
        E[w] = 1 and the click BPR estimates the uniform-negative BPR (DICE's interest and
        conformity terms keep the sampler's triples unweighted). One-sided and fallback
        triples keep w = 1.
        """
        w_more, w_less = self._side_weights(margin)
        w = torch.where(t.neg_more_popular, w_more.index_select(0, t.pos), w_less.index_select(0, t.pos))
        return w.masked_fill_(t.fallback, 1.0)

    def _side_weights(self, margin: float) -> tuple[Tensor, Tensor]:
        """Per item [n_items] float32: the click weight of a more / less popular negative at ``margin``
        (cached: an epoch has one margin)."""
        if self._weights is not None and self._weights[0] == margin:
            return self._weights[1]
        plan = self.sampler.side_plan(margin)
        n_less = plan.lo_end.to(torch.float64)
        n_more = (self.sampler.n_items - plan.hi_start).to(torch.float64)
        q_more = n_more / (n_more + n_less).clamp(min=1.0)
        pm = self.sampler.p_more
        both = (n_less > 0) & (n_more > 0)
        one = torch.ones_like(q_more)
        w_more = torch.where(both, q_more / max(pm, 1e-12), one).to(torch.float32)
        w_less = torch.where(both, (1.0 - q_more) / max(1.0 - pm, 1e-12), one).to(torch.float32)
        self._weights = (margin, (w_more, w_less))
        return w_more, w_less

    def mark_consumed(self, epoch: int, index: int) -> None:
        """Called after a batch was trained on (not when it was fetched: loaders prefetch)."""
        self._consumed = (epoch, index + 1)

    # -- exact resume --------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        epoch, done = self._consumed
        start = self._start.get(epoch)
        if start is None:  # nothing consumed yet in a fresh stream
            epoch, done, start = self.epoch, 0, self._start[self.epoch]
        return {"epoch": epoch, "consumed": done, "generator": start.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        epoch, done = int(state["epoch"]), int(state["consumed"])
        self.epoch, self._start, self._consumed = epoch, {epoch: state["generator"].clone()}, (epoch, done)
        self._skip = done
        if done >= len(self):  # the epoch was finished: replay it to reach the next epoch's generator state
            for _ in self:
                pass
