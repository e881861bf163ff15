"""Per-user item sets as CSR (indptr, indices): test items (truth) and items to mask (exclude).

Row ``u`` holds ``indices[indptr[u]:indptr[u + 1]]``, sorted ascending and without
duplicates (the canonical form every metric here relies on). No scipy or polars import:
scipy sparse matrices and polars frames / series are read by duck typing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np


class Csr(NamedTuple):
    """indptr: [U + 1] int64, indices: [nnz] int64; rows sorted ascending, no duplicates."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    def lengths(self) -> np.ndarray:
        """Items per row; [U] int64."""
        return np.diff(self.indptr)

    def row_ids(self) -> np.ndarray:
        """Row of every stored entry; [nnz] int64."""
        return np.repeat(np.arange(self.n_rows, dtype=np.int64), self.lengths())

    def row(self, u: int) -> np.ndarray:
        return self.indices[self.indptr[u] : self.indptr[u + 1]]


def csr_from_pairs(users: Any, items: Any, n_users: int) -> Csr:
    """CSR of (user_index, item_index) pairs; duplicate pairs count once.

    users, items: [N] integer arrays (numpy, polars Series, lists); n_users: rows of the result
    (users without a pair get an empty row). Returns a canonical ``Csr`` with ``n_users`` rows.
    """
    u = np.asarray(users, dtype=np.int64).ravel()
    i = np.asarray(items, dtype=np.int64).ravel()
    if u.shape != i.shape:
        raise ValueError(f"users ({u.size}) and items ({i.size}) must have the same length")
    if u.size and (u.min() < 0 or u.max() >= n_users):
        raise ValueError(f"user indices must lie in [0, {n_users}); got range [{u.min()}, {u.max()}]")
    if i.size and i.min() < 0:
        raise ValueError(f"item indices must be >= 0; got {i.min()}")
    return _canonical(u, i, n_users)


def csr_from_frame(frame: Any, n_users: int, user: str = "user_index", item: str = "item_index") -> Csr:
    """CSR of a polars (or pandas) frame's (user, item) index columns; see ``csr_from_pairs``.

    To mask train and valid items at test, pass both parts: ``pl.concat([train, valid])``.
    """
    return csr_from_pairs(np.asarray(frame[user]), np.asarray(frame[item]), n_users)


def csr_from_lists(rows: Sequence[Any]) -> Csr:
    """CSR of one item array per user (a list of arrays / lists)."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    items = np.concatenate([np.asarray(r, dtype=np.int64).ravel() for r in rows]) if len(rows) else []
    users = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
    return csr_from_pairs(users, items, len(rows))


def as_csr(x: Any, n_rows: int | None = None) -> Csr:
    """Canonical ``Csr`` from any of:

    - a ``Csr`` or a 2-tuple ``(indptr, indices)`` (a tuple is always read as CSR);
    - a scipy sparse matrix or array (its nonzero entries);
    - a dense boolean mask [U, I] (True = in the set);
    - a list of per-user item arrays, or a 2-D integer array [U, m] (m items per user).

    n_rows: the expected number of rows (checked when given).
    """
    if isinstance(x, tuple) and len(x) == 2:
        indptr = np.asarray(x[0], dtype=np.int64)
        indices = np.asarray(x[1], dtype=np.int64)
        if indptr.ndim != 1 or indptr.size == 0 or indptr[0] != 0 or indptr[-1] != indices.size:
            raise ValueError("CSR indptr must be 1-D, start at 0 and end at len(indices)")
        if np.any(np.diff(indptr) < 0):
            raise ValueError("CSR indptr must be non-decreasing")
        out = _canonical_csr(indptr, indices)
    elif hasattr(x, "tocsr"):  # scipy.sparse matrix or array
        m = x.tocsr()
        m.eliminate_zeros()
        out = _canonical_csr(np.asarray(m.indptr, dtype=np.int64), np.asarray(m.indices, dtype=np.int64))
    elif isinstance(x, np.ndarray) and x.ndim == 2 and x.dtype == bool:
        u, i = np.nonzero(x)
        out = Csr(np.concatenate([[0], np.cumsum(np.bincount(u, minlength=x.shape[0]))]), i.astype(np.int64))
    elif isinstance(x, np.ndarray) and x.ndim == 2:
        out = csr_from_lists(list(x))
    elif isinstance(x, Sequence):
        out = csr_from_lists(x)
    else:
        raise TypeError(f"cannot read per-user item sets from {type(x).__name__}")
    if n_rows is not None and out.n_rows != n_rows:
        raise ValueError(f"expected item sets for {n_rows} users, got {out.n_rows}")
    return out


def csr_rows(csr: Csr, rows: Any) -> Csr:
    """The rows ``rows`` ([B] int) of ``csr``, in that order (repeats allowed); a Csr with B rows."""
    rows = np.asarray(rows, dtype=np.int64).ravel()
    counts = csr.lengths()[rows]
    indptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    offset = np.repeat(csr.indptr[rows] - indptr[:-1], counts)
    return Csr(indptr, csr.indices[offset + np.arange(indptr[-1], dtype=np.int64)])


def _canonical_csr(indptr: np.ndarray, indices: np.ndarray) -> Csr:
    rows = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))
    if indices.size < 2:
        return Csr(indptr, indices)
    same_row = rows[1:] == rows[:-1]
    if not np.any(same_row & (indices[1:] <= indices[:-1])):  # already sorted, no duplicates
        return Csr(indptr, indices)
    return _canonical(rows, indices, indptr.size - 1)


def _canonical(users: np.ndarray, items: np.ndarray, n_users: int) -> Csr:
    order = np.lexsort((items, users))
    u, i = users[order], items[order]
    keep = np.ones(u.size, dtype=bool)
    keep[1:] = (u[1:] != u[:-1]) | (i[1:] != i[:-1])
    u, i = u[keep], i[keep]
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n_users), out=indptr[1:])
    return Csr(indptr, i)
