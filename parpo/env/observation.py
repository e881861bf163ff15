"""What an agent sees at each step: the task, its calls so far and the current candidates.

Two renderings of the same thing: arrays for a small transformer (candidate rows into the
catalogue and their catalogue features, ``Catalogue.FEATURES``) and ``to_json()`` for an LLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from parpo.env.catalogue import Catalogue
from parpo.env.schema import Filter, Recommend, Search, action_to_json
from parpo.env.tasks import Task


@dataclass(frozen=True)
class Call:
    """One step: the action (None when it did not parse), whether it was valid, and why not."""

    action: Search | Filter | Recommend | None
    valid: bool
    error: str | None = None

    @property
    def signature(self) -> str:
        """The call's plan token: ``search:<strategy>[+c]``, ``filter``, ``recommend`` or ``invalid``."""
        a = self.action
        if a is None or not self.valid and not isinstance(a, Recommend):
            return "invalid"
        if isinstance(a, Search):
            return f"search:{a.strategy}{'+c' if not a.constraints.empty else ''}"
        return a.tool


@dataclass(frozen=True)
class Observation:
    """``candidates``: catalogue rows [N] int64 (current list, best first; empty before any
    search); ``features``: their catalogue features [N, F] float32; ``step``: calls made so far."""

    task: Task
    k: int
    step: int
    max_steps: int
    history: tuple[Call, ...]
    candidates: np.ndarray
    features: np.ndarray
    catalogue: Catalogue

    @property
    def candidate_ids(self) -> list[str]:
        return [self.catalogue.item_ids[r] for r in self.candidates]

    @property
    def searched(self) -> bool:
        return any(c.valid and isinstance(c.action, Search) for c in self.history)

    def to_json(self) -> dict[str, Any]:
        """The observation as plain JSON data (for an LLM prompt or a log)."""
        c = self.catalogue
        cands = []
        for r in self.candidates.tolist():
            price = float(c.price[r])
            cands.append(
                {
                    "item_id": c.item_ids[r],
                    "category": c.categories[c.cat[r]] if c.cat[r] >= 0 else None,
                    "price": price if np.isfinite(price) else None,
                    "popularity": int(c.popularity[r]),
                    "attributes": c.frame["attributes"][r].to_list(),
                }
            )
        t = self.task
        return {
            "user_id": t.user_id,
            "cold": t.cold,
            "request": t.request.model_dump(mode="json"),
            "k": self.k,
            "step": self.step,
            "max_steps": self.max_steps,
            "history": [
                {"action": action_to_json(h.action) if h.action else None, "valid": h.valid, "error": h.error}
                for h in self.history
            ],
            "candidates": cands,
        }
