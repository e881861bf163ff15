"""Causal embeddings: an interest and a conformity table for every user and item (DICE).

DICE (Zheng et al., "Disentangling User Interest and Conformity for
Recommendation with Causal Embedding", WWW 2021) scores a (user, item) pair as

    interest(u, i)    = <u_int, i_int>
    conformity(u, i)  = <u_con, i_con>
    click(u, i)       = interest(u, i) + conformity(u, i)

With ``disentangle=False`` there is one branch (``interest``) and
``click = interest``: plain MF-BPR (Rendle et al., UAI 2009), the baseline.
The backbone decides how the tables become the vectors that are scored: ``mf``
uses them as they are; ``lightgcn`` propagates each branch over the
normalised user-item graph (``reward_models.model.graph``).

Hybrid embeddings (``user_features`` / ``item_features``, sparse [n, F] matrices of
``reward_models.features``): a row's table entry is its id row plus its features' rows,
``e_i + X_i W`` on every branch, so a sparse item shares strength with items of its category,
attributes and price. The composed rows are what every loss, the discrepancy, LightGCN and
``export`` read: the readout sees plain vectors, as before. On ``mf`` a training step composes
only the rows it reads (``batch_tables``): the same values and gradients, at a cost that follows
the batch rather than the catalogue.

Popularity conformity (``item_buckets``): an item's conformity vector is the row of its
popularity bucket, ``i_con = P[bucket(i)]``, instead of a free id row. DICE's conformity is the
user's response to popularity; with free rows the click loss fills both branches with the same
taste (measured on the synthetic world: the conformity branch ranked the true interest as well
as the interest branch did), so the cause terms must hold the split alone. With bucket rows the
branch can only express "how much does this user follow popularity, per popularity level", and
whatever else the clicks say has to go to the interest branch. The user side is unchanged.

Scalar conformity (``fixed_levels``): the bucket rows are fixed, ``P[b] = (b / 4, 0, ..., 0)``, so
``conformity(u, i) = c_u level(i)`` with ``c_u`` the first coordinate of the user's conformity
row: the form of the synthetic world's click logit (``c_u pop_i``, docs/synthetic.md). Free
bucket rows can also express "items at this popularity are liked", and popular items are often
popular because many users like them: that share of taste left the interest branch and the
agent ranked worse (benchmarks/README.md). One coefficient per user cannot hold item appeal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reward_models.model.graph import propagate

BRANCHES = ("interest", "conformity")


@dataclass
class Tables:
    """The vectors that are scored: ``user_all`` [n_users, nb * d] and ``item_all`` [n_items, nb * d]
    hold the branches side by side (one gather per batch); ``user[b]``, ``item[b]`` are their
    per-branch views [n, d]."""

    user_all: Tensor
    item_all: Tensor
    branches: tuple[str, ...]
    #: [n_u], [n_i]: the model's index of each row when the tables hold some rows only
    #: (``CausalEmbeddings.batch_tables``); None: every row, in index order
    user_ids: Tensor | None = None
    item_ids: Tensor | None = None

    def _split(self, x: Tensor) -> dict[str, Tensor]:
        d = x.shape[1] // len(self.branches)
        return {b: x[:, k * d : (k + 1) * d] for k, b in enumerate(self.branches)}

    @property
    def user(self) -> dict[str, Tensor]:
        return self._split(self.user_all)

    @property
    def item(self) -> dict[str, Tensor]:
        return self._split(self.item_all)


@dataclass
class BatchScores:
    """Per-branch score differences of a batch of triples (u, i, j): ``diff[b]`` [B] is
    ``<u_b, i_b> - <u_b, j_b>`` (every BPR term reads only a difference). ``sq_norm``: the
    summed squared norms of the gathered rows (u, i, j, every branch), a scalar, when asked for."""

    diff: dict[str, Tensor]
    sq_norm: Tensor | None = None

    @property
    def click(self) -> Tensor:
        """click(u, i) - click(u, j) [B]: the sum over branches."""
        return sum(self.diff.values())  # type: ignore[return-value]


# Rows of a triple chunk: [CHUNK, 128] float32 is 1 MiB, so a chunk's gathers stay in cache.
CHUNK = 2048


class _PairDifference(torch.autograd.Function):
    """``<u_b, i_b - j_b>`` per branch b: users [n_u, nb * d], items [n_i, nb * d], user/pos/neg [B]
    -> [B, nb].

    The plain autograd graph keeps three gathered [B, nb * d] matrices, their products and two
    dense embedding gradients; here forward and backward gather the rows chunk by chunk (in
    cache), backward recomputes them and scatters the row gradients straight into the table
    gradients (``index_add_``): about half the memory traffic of the plain graph on CPU.
    """

    @staticmethod
    def forward(
        ctx: Any, users: Tensor, items: Tensor, user: Tensor, pos: Tensor, neg: Tensor, nb: int
    ) -> Tensor:
        b, d = user.shape[0], users.shape[1] // nb
        out = users.new_empty(b, nb)
        for s in range(0, b, CHUNK):
            e = min(b, s + CHUNK)
            u, dif = _rows(users, items, user[s:e], pos[s:e], neg[s:e])
            torch.sum(u.mul_(dif).view(e - s, nb, d), -1, out=out[s:e])
        ctx.save_for_backward(users, items, user, pos, neg)
        ctx.nb = nb
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        users, items, user, pos, neg = ctx.saved_tensors
        nb, b = ctx.nb, user.shape[0]
        d = users.shape[1] // nb
        g_users = torch.zeros_like(users) if ctx.needs_input_grad[0] else None
        g_items = torch.zeros_like(items) if ctx.needs_input_grad[1] else None
        for s in range(0, b, CHUNK):
            e = min(b, s + CHUNK)
            u, dif = _rows(users, items, user[s:e], pos[s:e], neg[s:e])
            g = grad[s:e, :, None]  # [c, nb, 1]: one weight per branch
            if g_users is not None:
                g_users.index_add_(0, user[s:e], dif.view(e - s, nb, d).mul_(g).view(e - s, nb * d))
            if g_items is not None:
                gi = u.view(e - s, nb, d).mul_(g).view(e - s, nb * d)
                g_items.index_add_(0, pos[s:e], gi)
                g_items.index_add_(0, neg[s:e], gi, alpha=-1)
        return g_users, g_items, None, None, None, None


def padded_rows(x: Tensor) -> tuple[Tensor, Tensor]:
    """A sparse COO [n, F] matrix as padded rows: columns [n, k] int64 and values [n, k] (k: the
    most entries of a row; padding is column 0 with value 0): any rows' entries in one gather."""
    x = x.coalesce()
    r, c = x.indices()
    n = x.shape[0]
    counts = torch.bincount(r, minlength=n)
    k = max(int(counts.max()) if r.numel() else 0, 1)
    start = torch.cumsum(counts, 0) - counts
    pos = torch.arange(r.numel()) - start[r]
    cols = torch.zeros(n, k, dtype=torch.int64)
    vals = torch.zeros(n, k, dtype=x.dtype)
    cols[r, pos], vals[r, pos] = c, x.values()
    return cols, vals


def popularity_buckets(popularity: np.ndarray, n_buckets: int) -> Tensor:
    """Bucket [n] int64 of each item's train popularity (distinct users): ``floor(log2(1 + pop))``
    capped at ``n_buckets - 1``. Fixed edges, not quantiles: a bucket means the same popularity in
    every dataset and retrain, and an item never seen is in bucket 0."""
    b = np.floor(np.log2(1.0 + np.maximum(np.asarray(popularity, dtype=np.float64), 0.0)))
    return torch.from_numpy(np.minimum(b, n_buckets - 1).astype(np.int64))


def _rows(users: Tensor, items: Tensor, user: Tensor, pos: Tensor, neg: Tensor) -> tuple[Tensor, Tensor]:
    """Fresh (writable) user rows and positive-minus-negative item rows, [c, nb * d] each."""
    dif = items.index_select(0, pos)
    return users.index_select(0, user), dif.sub_(items.index_select(0, neg))


class CausalEmbeddings(nn.Module):
    """Interest/conformity tables with an MF or LightGCN backbone.

    Parameters ``user`` [n_users, nb * dim] and ``item`` [n_items, nb * dim] hold the
    ``nb`` branches side by side (both, or ``interest`` only when not disentangled).
    ``adj``: the normalised adjacency for ``backbone="lightgcn"`` (a buffer, not saved).
    """

    def __init__(
        self,
        n_users: int,
        n_items: int,
        dim: int,
        *,
        backbone: str = "mf",
        n_layers: int = 2,
        disentangle: bool = True,
        adj: Tensor | None = None,
        init_std: float = 0.1,
        generator: torch.Generator | None = None,
        user_features: Tensor | None = None,
        item_features: Tensor | None = None,
        item_buckets: Tensor | None = None,
        n_buckets: int = 0,
        fixed_levels: bool = False,
        sparse_rows: bool = False,
    ) -> None:
        """``item_buckets`` [n_items] int64 in [0, n_buckets): popularity conformity (module
        docstring); the ``item`` table and the item feature rows then hold the interest branch only.
        ``fixed_levels``: the bucket rows are the fixed levels of scalar conformity (a buffer).
        ``sparse_rows``: a training step's id-table gradients are sparse (the rows it read; ``mf``
        only, for ``reward_models.training.lazy_adam``)."""
        super().__init__()
        if backbone not in ("mf", "lightgcn"):
            raise ValueError(f"unknown backbone {backbone!r} (mf or lightgcn)")
        if backbone == "lightgcn" and adj is None:
            raise ValueError("backbone 'lightgcn' needs the normalised adjacency (adj)")
        self.n_users, self.n_items, self.dim = n_users, n_items, dim
        self.backbone, self.n_layers = backbone, n_layers
        self.sparse_rows = sparse_rows and backbone == "mf"  # LightGCN reads every row
        self.branches: tuple[str, ...] = BRANCHES if disentangle else ("interest",)
        nb = len(self.branches)
        self.item_buckets = item_buckets if disentangle else None  # plain attribute, like adj
        width = {"user": nb * dim, "item": dim if self.item_buckets is not None else nb * dim}
        for side, n in (("user", n_users), ("item", n_items)):
            w = torch.empty(n, width[side])
            w.normal_(0.0, init_std, generator=generator)
            self.register_parameter(side, nn.Parameter(w))
        self.fixed_levels = fixed_levels and self.item_buckets is not None
        if self.fixed_levels:
            w = torch.zeros(n_buckets, dim)
            w[:, 0] = torch.arange(n_buckets, dtype=torch.float32) / 4.0  # levels 0 .. ~4 at 16 buckets
            self.register_buffer("item_pop", w)
        elif self.item_buckets is not None:
            w = torch.empty(n_buckets, dim)
            w.normal_(0.0, init_std, generator=generator)
            self.item_pop = nn.Parameter(w)
        # Feature rows start at zero: the model starts as the id-only one, features grow as they help.
        self.features = {"user": user_features, "item": item_features}  # plain attributes, like adj
        self.padded = {k: padded_rows(x) if x is not None else None for k, x in self.features.items()}
        for side, x in self.features.items():
            if x is not None:
                self.register_parameter(f"{side}_feat", nn.Parameter(torch.zeros(x.shape[1], width[side])))
        self.adj = adj  # plain attribute: never in state_dict, moved by ``to`` below

    @property
    def disentangled(self) -> bool:
        return len(self.branches) == 2

    def _apply(self, fn, recurse=True):  # keep the sparse graph on the parameters' device
        out = super()._apply(fn, recurse)
        if self.adj is not None:
            self.adj = fn(self.adj)
        self.features = {k: fn(x) if x is not None else None for k, x in self.features.items()}
        self.padded = {k: (fn(p[0]), fn(p[1])) if p is not None else None for k, p in self.padded.items()}
        if self.item_buckets is not None:
            self.item_buckets = fn(self.item_buckets)
        return out

    @torch.no_grad()
    def set_rows(self, user: Tensor, item: Tensor) -> None:
        """Set the id tables from scored rows user [n_users, nb * d], item [n_items, nb * d] (a warm
        start; feature rows are zero then, so ``rows`` returns these rows). With popularity
        conformity each bucket's row is the mean conformity row of its items (0 when empty); fixed
        levels stay as they are and each user's coefficient is fitted to the given rows' conformity
        scores (least squares over the items)."""
        self.user.copy_(user)
        if self.item_buckets is None:
            self.item.copy_(item)
            return
        self.item.copy_(item[:, : self.dim])
        if self.fixed_levels:
            # c_u: the least-squares fit of the base's conformity scores by c_u * level(i) over
            # every item (exact when the base had scalar conformity too); other coordinates 0
            levels = self.item_pop[self.item_buckets, 0].to(item.dtype)
            proj = (levels[:, None] * item[:, self.dim :]).sum(0) / levels.pow(2).sum().clamp(min=1e-12)
            con = torch.zeros_like(user[:, self.dim :])
            con[:, 0] = user[:, self.dim :] @ proj
            self.user[:, self.dim :].copy_(con)
            return
        sums = torch.zeros_like(self.item_pop).index_add_(0, self.item_buckets, item[:, self.dim :])
        counts = torch.bincount(self.item_buckets, minlength=self.item_pop.shape[0]).clamp(min=1)
        self.item_pop.copy_(sums / counts[:, None].to(sums.dtype))

    def rows(self, side: str, index: Tensor | None = None) -> Tensor:
        """The scored rows of one side before any propagation [n, width]: id rows plus feature
        rows (the id table itself without features), then the popularity rows of the item
        conformity branch when it has them. ``index`` [k]: those entries only, at a cost that
        follows k (a training step's rows), the same values as the whole table's."""
        w = getattr(self, side)
        rows = w if index is None else F.embedding(index, w, sparse=self.sparse_rows)
        x = self._features_of(side, index)
        if x is not None:
            rows = rows + torch.sparse.mm(x, getattr(self, f"{side}_feat"))
        if side == "item" and self.item_buckets is not None:
            b = self.item_buckets if index is None else self.item_buckets.index_select(0, index)
            rows = torch.cat([rows, self.item_pop.index_select(0, b)], dim=1)
        return rows

    def _features_of(self, side: str, index: Tensor | None) -> Tensor | None:
        """The side's feature matrix [n, F], or its rows at ``index`` as a coalesced COO [k, F]."""
        x = self.features[side]
        if x is None or index is None:
            return x
        cols, vals = (t.index_select(0, index) for t in self.padded[side])
        keep = vals != 0  # not the padding; each row's columns stay in order, so it is coalesced
        r = torch.arange(index.numel(), device=index.device)[:, None].expand_as(cols)[keep]
        return torch.sparse_coo_tensor(
            torch.stack([r, cols[keep]]), vals[keep], (index.numel(), x.shape[1]),
            is_coalesced=True, check_invariants=False,
        )  # fmt: skip

    def batch_tables(self, user: Tensor, item: Tensor) -> tuple[Tables, Tensor, Tensor]:
        """Tables of the distinct rows a step reads (``mf``): user [a], item [b] int64 model
        indices -> (tables over those rows with ``user_ids``/``item_ids`` set, user [a] and
        item [b] as row positions in them). The losses' values and gradients are the whole
        tables' (a row the step does not read gets no gradient either way), while composing
        costs rows read, not rows held: at 600k users it was most of a step."""
        if self.backbone != "mf":
            raise ValueError("batch_tables needs the mf backbone (LightGCN propagates over every row)")
        uu, u_at = torch.unique(user, return_inverse=True)
        ii, i_at = torch.unique(item, return_inverse=True)
        t = Tables(self.rows("user", uu), self.rows("item", ii), self.branches, uu, ii)
        return t, u_at, i_at

    def tables(self) -> Tables:
        """The scored vectors of every user and item (LightGCN: one propagation for all branches)."""
        user, item = self.rows("user"), self.rows("item")
        if self.backbone == "mf":
            return Tables(user, item, self.branches)
        e = propagate(self.adj, torch.cat([user, item], dim=0), self.n_layers)
        return Tables(e[: self.n_users], e[self.n_users :], self.branches)

    def forward(
        self, user: Tensor, pos: Tensor, neg: Tensor, tables: Tables | None = None, *, sq_norm: bool = False
    ) -> BatchScores:
        """Score differences of triples: user, pos, neg [B] int64 -> per-branch [B].

        ``tables``: the result of ``tables()`` when the caller already has it (LightGCN
        propagates once per step, for the scores and the discrepancy alike). ``sq_norm``:
        also the squared norms of the rows (an L2 penalty)."""
        t = tables if tables is not None else self.tables()
        nb = len(self.branches)
        diff = _PairDifference.apply(t.user_all, t.item_all, user, pos, neg, nb)
        sq = None
        if sq_norm:
            # With features, the id rows alone: shrinking them lets the shared feature rows carry
            # what sparse rows cannot learn (without features these are the scored rows of mf);
            # popularity buckets are shared rows too.
            hybrid = self.item_buckets is not None or any(x is not None for x in self.features.values())
            if hybrid:  # the id tables are indexed by model index
                u_rows, i_rows = self.user, self.item
                if t.user_ids is not None and t.item_ids is not None:
                    user, pos, neg = t.user_ids[user], t.item_ids[pos], t.item_ids[neg]
            else:
                u_rows, i_rows = t.user_all, t.item_all
            sparse = self.sparse_rows and hybrid  # only a parameter takes a sparse gradient
            rows = tuple(
                F.embedding(x, w, sparse=sparse) for x, w in ((user, u_rows), (pos, i_rows), (neg, i_rows))
            )
            sq = sum(r.pow(2).sum() for r in rows)
        return BatchScores({br: diff[:, k] for k, br in enumerate(self.branches)}, sq)

    @torch.no_grad()
    def export(self) -> dict[str, Tensor]:
        """The scored vectors as named tensors for readout: ``user_interest``, ``item_interest``
        (and ``user_conformity``, ``item_conformity`` when disentangled); float32, CPU."""
        t = self.tables()
        out = {}
        for b in self.branches:
            out[f"user_{b}"] = t.user[b].detach().float().cpu().clone()
            out[f"item_{b}"] = t.item[b].detach().float().cpu().clone()
        return out
