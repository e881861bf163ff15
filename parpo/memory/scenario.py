"""Scenarios and the hashed bag-of-tokens embedding that recall and merging compare.

A *scenario* is what a request looks like to the memory: its category (or request kind when it
has none), its price band and its attributes. A skill's embedding adds its plan tokens, so two
skills are near-duplicates when they answer the same scenario with the same plan:

    tokens(Query(category="shoes", price_max=79.0))  ->  ["cat:shoes", "band:6"]
    price_band(79.0) = floor(log2(1 + 79)) = 6;  price_band(None) = -1 (no cap)

``embed`` is the signed hashing trick (Weinberger et al., 2009): each token adds +-1 to one of
``dim`` slots chosen by a stable hash (blake2b, not Python's salted ``hash``), then the vector is
scaled to unit length, so a dot product is a cosine over token bags.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Highest price band (caps above 2**16 share it).
MAX_BAND = 16


def price_band(price_max: float | None) -> int:
    """``floor(log2(1 + cap))`` clipped to [0, MAX_BAND]; -1 when the request has no cap."""
    if price_max is None or not math.isfinite(price_max):
        return -1
    return min(int(math.log2(1.0 + max(price_max, 0.0))), MAX_BAND)


@dataclass(frozen=True)
class Query:
    """What retrieval sees of a request (the API's ``Request`` without its free text)."""

    category: str | None = None
    price_max: float | None = None
    attributes: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """``category``, ``attributes`` or ``open``: the request type when there is no category."""
        return "category" if self.category is not None else "attributes" if self.attributes else "open"

    @property
    def key(self) -> str:
        """The scenario node's name: category (or kind) and price band, e.g. ``shoes|6``."""
        return f"{self.category if self.category is not None else '<' + self.kind + '>'}|{price_band(self.price_max)}"

    @classmethod
    def of(cls, request: object) -> Query:
        """From a ``parpo.env.schema.Request`` (anything with ``category`` and ``constraints``)."""
        c = request.constraints  # type: ignore[attr-defined]
        return cls(request.category, c.price_max, tuple(c.attributes))  # type: ignore[attr-defined]


def tokens(query: Query) -> list[str]:
    """Scenario tokens: category or kind, price band, one per attribute."""
    head = f"cat:{query.category}" if query.category is not None else f"kind:{query.kind}"
    return [head, f"band:{price_band(query.price_max)}", *(f"attr:{a}" for a in query.attributes)]


def scenario_tokens(query: Query) -> list[str]:
    """The scenario node's tokens: category or kind, and price band (no attributes)."""
    return tokens(query)[:2]


def plan_tokens(plan: Sequence[str], strategy: str | None, k: int) -> list[str]:
    """A plan's tokens: each call signature with its position, the strategy and the slate size."""
    return [*(f"step{i}:{s}" for i, s in enumerate(plan)), f"strategy:{strategy}", f"k:{k}"]


def _slot(token: str, dim: int) -> tuple[int, float]:
    h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
    return h % dim, 1.0 if (h >> 63) & 1 else -1.0


def embed(toks: Sequence[str], dim: int) -> np.ndarray:
    """[dim] float32 unit vector of a token bag (zeros for an empty bag)."""
    v = np.zeros(dim, dtype=np.float32)
    for t in toks:
        i, s = _slot(t, dim)
        v[i] += s
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def bag_cosine(a: Sequence[str], b: Sequence[str]) -> float:
    """Exact cosine of two token bags (what ``embed`` approximates, without hash collisions)."""
    ca, cb = Counter(a), Counter(b)
    dot = sum(n * cb[t] for t, n in ca.items())
    norm = math.sqrt(sum(n * n for n in ca.values()) * sum(n * n for n in cb.values()))
    return dot / norm if norm > 0 else 0.0
