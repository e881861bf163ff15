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
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """Per-branch scores of a batch of triples, each [B]; ``rows`` are the gathered vectors
    (branch -> (user [B, d], pos [B, d], neg [B, d])) for regularisers."""

    pos: dict[str, Tensor]
    neg: dict[str, Tensor]
    rows: dict[str, tuple[Tensor, Tensor, Tensor]]

    def click(self, side: str) -> Tensor:
        s = self.pos if side == "pos" else self.neg
        return sum(s.values())  # type: ignore[return-value]


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
    ) -> None:
        super().__init__()
        if backbone not in ("mf", "lightgcn"):
            raise ValueError(f"unknown backbone {backbone!r} (mf or lightgcn)")
        if backbone == "lightgcn" and adj is None:
            raise ValueError("backbone 'lightgcn' needs the normalised adjacency (adj)")
        self.n_users, self.n_items, self.dim = n_users, n_items, dim
        self.backbone, self.n_layers = backbone, n_layers
        self.branches: tuple[str, ...] = BRANCHES if disentangle else ("interest",)
        nb = len(self.branches)
        for side, n in (("user", n_users), ("item", n_items)):
            w = torch.empty(n, nb * dim)
            w.normal_(0.0, init_std, generator=generator)
            self.register_parameter(side, nn.Parameter(w))
        self.adj = adj  # plain attribute: never in state_dict, moved by ``to`` below

    @property
    def disentangled(self) -> bool:
        return len(self.branches) == 2

    def _apply(self, fn, recurse=True):  # keep the sparse graph on the parameters' device
        out = super()._apply(fn, recurse)
        if self.adj is not None:
            self.adj = fn(self.adj)
        return out

    def raw(self, side: str, branch: str) -> Tensor:
        """The parameter rows of one branch (a view) [n, dim]."""
        k = self.branches.index(branch)
        return getattr(self, side)[:, k * self.dim : (k + 1) * self.dim]

    def tables(self) -> Tables:
        """The scored vectors of every user and item (LightGCN: one propagation for all branches)."""
        if self.backbone == "mf":
            return Tables(self.user, self.item, self.branches)
        e = propagate(self.adj, torch.cat([self.user, self.item], dim=0), self.n_layers)
        return Tables(e[: self.n_users], e[self.n_users :], self.branches)

    def forward(self, user: Tensor, pos: Tensor, neg: Tensor, tables: Tables | None = None) -> BatchScores:
        """Scores of triples: user, pos, neg [B] int64 -> per-branch [B] scores.

        ``tables``: the result of ``tables()`` when the caller already has it (LightGCN
        propagates once per step, for the scores and the discrepancy alike)."""
        t = tables if tables is not None else self.tables()
        u, p, n = F.embedding(user, t.user_all), F.embedding(pos, t.item_all), F.embedding(neg, t.item_all)
        nb, b = len(self.branches), user.shape[0]
        sp = (u * p).view(b, nb, self.dim).sum(-1)  # [B, nb]
        sn = (u * n).view(b, nb, self.dim).sum(-1)
        ps, ns, rows = {}, {}, {}
        for k, br in enumerate(self.branches):
            cols = slice(k * self.dim, (k + 1) * self.dim)
            ps[br], ns[br] = sp[:, k], sn[:, k]
            rows[br] = (u[:, cols], p[:, cols], n[:, cols])
        return BatchScores(ps, ns, rows)

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
