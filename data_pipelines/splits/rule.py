"""What counts as a positive interaction: the positives rule a split is cut with.

A split's folder name carries ``rule_hash()``, so two rules that select the
same rows under the same weights share one folder, and any change of rule
makes a new one.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import polars as pl
from pydantic import Field, field_validator, model_validator

from data_pipelines.schema import DEFAULT_POSITIVE_EVENTS, EVENTS
from parpo_core.config import StrictModel


class PositivesRule(StrictModel):
    """Which canonical interaction rows are positives, and how much each weighs.

    - ``events``: event types that count (default: every non-impression event,
      ``rate`` of any value included — the RecBole-Debias protocol).
    - ``min_value``: when set, a row that carries a ``value`` (a rating, a
      reward) must have ``value >= min_value``; rows without a value (a click,
      a purchase) are not filtered by it. ``min_value=4`` is "rating >= 4".
    - ``weights``: per-event training weight (default 1.0), for models that
      weight positives; it never changes which rows a split holds.
    """

    events: tuple[str, ...] = Field(
        DEFAULT_POSITIVE_EVENTS,
        description="events that count as positives (every non-impression event by default, RecBole-Debias)",
    )
    min_value: float | None = Field(
        None,
        description="for valued events (rate): keep rows with value >= this (e.g. 4 for rating >= 4; null: all)",
    )
    weights: dict[str, float] = Field({}, description="per-event weight of a positive (absent: 1.0)")

    @field_validator("events")
    @classmethod
    def _known_events(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [e for e in v if e not in EVENTS]
        if unknown:
            raise ValueError(f"unknown event(s) {unknown}; choose from {list(EVENTS)}")
        if not v:
            raise ValueError("events must name at least one event type")
        # Canonical order (funnel order) so that permutations hash alike.
        return tuple(e for e in EVENTS if e in set(v))

    @field_validator("min_value")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("min_value must be a finite number")
        return v

    @model_validator(mode="after")
    def _weights_for_listed_events(self) -> PositivesRule:
        bad = [e for e in self.weights if e not in self.events]
        if bad:
            raise ValueError(f"weights name event(s) {bad} that are not positives under this rule")
        nonpos = [e for e, w in self.weights.items() if not (math.isfinite(w) and w > 0)]
        if nonpos:
            raise ValueError(f"weights must be finite and > 0 (bad: {nonpos})")
        return self

    def canonical(self) -> dict[str, Any]:
        """The rule as plain JSON data; weights of 1.0 are dropped (they are the default)."""
        weights = {e: float(self.weights[e]) for e in self.events if self.weights.get(e, 1.0) != 1.0}
        return {"events": list(self.events), "min_value": self.min_value, "weights": weights}

    def rule_hash(self) -> str:
        """First 12 hex digits of sha256 over the canonical JSON (sorted keys, no spaces)."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def is_positive(self) -> pl.Expr:
        """Boolean expression over canonical interaction rows: is this row a positive?"""
        expr = pl.col("event").is_in(list(self.events))
        if self.min_value is not None:
            expr = expr & (pl.col("value").is_null() | (pl.col("value") >= self.min_value))
        return expr

    def weight(self) -> pl.Expr:
        """Float64 expression: the training weight of a positive row (1.0 unless set)."""
        w = self.canonical()["weights"]
        if not w:
            return pl.lit(1.0, dtype=pl.Float64)
        return pl.col("event").replace_strict(w, default=1.0, return_dtype=pl.Float64)
