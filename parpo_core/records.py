"""The server's log records: one decision per answered ``/v1/act``, one event per accepted
feedback event, one JSON line each (``EVENTS/decisions/*.jsonl``, ``EVENTS/events/*.jsonl``).

Defined once here: ``serving`` builds them, the ``parpo-events`` adapter checks their
``schema_version`` and reads them into canonical rows. Compatibility rules: a new optional
field (with a default) keeps ``RECORD_SCHEMA_VERSION``; readers ignore fields they do not
know; anything else (a renamed, removed or retyped field) bumps it, and a reader refuses
records newer than it knows, one quarantined line each, naming the version.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RECORD_SCHEMA_VERSION = 1


class Record(BaseModel):
    """Common head of every record; unknown fields are ignored when read (forward compatible)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: int = RECORD_SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The record as written: ``kind`` and ``schema_version`` first, then the fields."""
        body = self.model_dump(mode="json")
        return {"kind": body.pop("kind"), "schema_version": body.pop("schema_version"), **body}


class SlateEntry(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    item_id: str
    position: int = Field(ge=1, description="1-based slot")
    propensity: float = Field(description="P(this item at this position) under the served policy")


class DecisionRecord(Record):
    """A slate the server answered, with what is needed to replay and evaluate it."""

    kind: Literal["decision"] = "decision"
    ts: float = Field(description="server time of the answer (Unix seconds)")
    request_id: str
    user_id: str
    request: dict[str, Any] = Field(description="the request as received: category, constraints, text")
    context: dict[str, Any] | None = None
    candidates: list[str] | None = None
    k: int
    policy_version: str
    reward_version: str
    explore: float = Field(description="sampling temperature (0: greedy)")
    n_samples: int = Field(description="Monte-Carlo episodes behind the propensities")
    evaluable: bool = Field(description="sampled with propensities an estimator may use")
    fallback: str | None = None
    plan: str = Field(description="the tool-call signature, e.g. 'search:category>recommend'")
    cold_user: bool
    slate: list[SlateEntry]
    slot1_low: float | None = Field(
        None, description="P(the first item first | request) is at least this (exact over the plans drawn)"
    )
    slot1_high: float | None = Field(None, description="... and at most this (plus the plans no draw took)")


class EventRecord(Record):
    """A feedback event as accepted, with the server's flags (nothing is dropped)."""

    kind: Literal["event"] = "event"
    received: float = Field(description="server receive time (Unix seconds)")
    request_id: str
    position: int
    event: str
    item_id: str | None = None
    user_id: str | None = None
    ts: float | None = None
    value: float | None = None
    event_id: str | None = None
    logged_item_id: str | None = Field(None, description="the item the decision put at that position")
    duplicate: bool
    unknown_request: bool
    item_mismatch: bool
