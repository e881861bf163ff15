"""LightGCN propagation (He et al., SIGIR 2020) over the user-item bipartite graph.

The graph has ``n_users + n_items`` nodes (users first) and an edge for every
distinct train pair. With ``A`` its adjacency and ``D`` the degree matrix, the
normalised adjacency is ``Â = D^-1/2 A D^-1/2`` (nodes without an edge get an
all-zero row). ``K`` layers of ``E_{k+1} = Â E_k`` are averaged with the input:

    E_final = (E_0 + E_1 + ... + E_K) / (K + 1)
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def normalized_adjacency(
    user: np.ndarray | Tensor, item: np.ndarray | Tensor, n_users: int, n_items: int
) -> Tensor:
    """``D^-1/2 A D^-1/2`` as a coalesced sparse COO tensor [N, N], N = n_users + n_items, float32.

    user, item: [E] int64 train pairs (duplicates count once).
    """
    u = torch.as_tensor(np.asarray(user), dtype=torch.int64)
    i = torch.as_tensor(np.asarray(item), dtype=torch.int64)
    key = torch.unique(u * n_items + i)
    u, i = key // n_items, key % n_items
    n = n_users + n_items
    rows = torch.cat([u, i + n_users])
    cols = torch.cat([i + n_users, u])
    deg = torch.bincount(rows, minlength=n).to(torch.float32)
    inv_sqrt = torch.where(deg > 0, deg.clamp(min=1).rsqrt(), torch.zeros_like(deg))
    vals = inv_sqrt[rows] * inv_sqrt[cols]
    # indices are in range by construction: skip torch's invariant check explicitly
    return torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (n, n), check_invariants=False).coalesce()


def propagate(adj: Tensor, emb: Tensor, n_layers: int) -> Tensor:
    """Mean of the layer outputs ``E_0 .. E_K``; adj [N, N] sparse, emb [N, d] -> [N, d]."""
    out, e = emb, emb
    for _ in range(n_layers):
        e = torch.sparse.mm(adj, e)
        out = out + e
    return out / (n_layers + 1)
