"""What an agent sees at each step: the task, its calls so far and the current candidates.

Two renderings of the same thing: arrays for a small transformer (candidate rows into the
catalogue and their catalogue features, ``Catalogue.FEATURES``) and ``to_json()`` for an LLM.
Neither holds reward-model scores: a policy that reads them passes the user's personal table
(``parpo.env.personal``) to ``to_json(personal=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from parpo.env.catalogue import Catalogue
from parpo.env.personal import PERSONAL_FEATURES
from parpo.env.schema import Filter, Recommend, Search, action_to_json
from parpo.env.tasks import Task

#: ``to_json``'s names of the ``PERSONAL_FEATURES`` columns (``interest_pct``, ..., ``scored``).
PERSONAL_KEYS: tuple[str, ...] = tuple(f.removeprefix("rm_") for f in PERSONAL_FEATURES)
#: Decimals of the personal scores in ``to_json``: an LLM reads them as text, and finer digits
#: only cost tokens.
PERSONAL_DECIMALS = 2


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

    def to_json(self, personal: np.ndarray | None = None) -> dict[str, Any]:
        """The observation as plain JSON data (for an LLM prompt or a log).

        ``personal``: the task user's personal table [n_items, 4] (``PersonalTables``); given,
        each candidate also carries the reward model's view of it for this user (``PERSONAL_KEYS``:
        interest percentile, interest and conformity z-scores rounded to ``PERSONAL_DECIMALS``,
        and ``scored``, false with the neutral values where the model cannot score the item)."""
        c = self.catalogue
        cands = []
        for r in self.candidates.tolist():
            price = float(c.price[r])
            cand = {
                "item_id": c.item_ids[r],
                "category": c.categories[c.cat[r]] if c.cat[r] >= 0 else None,
                "price": price if np.isfinite(price) else None,
                "popularity": int(c.popularity[r]),
                "attributes": c.frame["attributes"][r].to_list(),
            }
            if personal is not None:
                *scores, scored = personal[r].tolist()
                # + 0.0: a small negative rounds to -0.0, which JSON would print as "-0.0"
                values = [round(v, PERSONAL_DECIMALS) + 0.0 for v in scores] + [bool(scored)]
                cand.update(zip(PERSONAL_KEYS, values, strict=True))
            cands.append(cand)
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
