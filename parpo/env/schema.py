"""Typed agent actions and requests: one versioned JSON Schema, exported from code.

Every policy backend, the API (``serving/``) and a later LLM backend speak these
models. Items are referenced by external id. ``action_json_schema()`` is the
contract an LLM is prompted with; ``parse_action`` turns its JSON back into a
typed action or raises ``ActionError`` (one line naming the field).

    parse_action('{"tool": "search", "category": "shoes", "strategy": "price_asc", "k": 20}')
    Search(tool='search', category='shoes', strategy='price_asc', constraints=Constraints(), attributes=[], k=20)
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from parpo_core.errors import UserError
from parpo_core.limits import PRICE_MAX

#: Bumped whenever an action, a field or a strategy changes meaning or is removed.
ACTION_SCHEMA_VERSION = 1
#: Largest slate ``recommend`` may carry and largest candidate list ``search`` may ask for.
MAX_ITEMS = 100

#: Catalogue signals a search can rank by (never reward-model scores).
STRATEGIES: tuple[str, ...] = ("popularity", "recency", "price_asc", "price_desc", "attribute_match")
Strategy = Literal["popularity", "recency", "price_asc", "price_desc", "attribute_match"]


class ActionError(UserError, ValueError):
    """An action (or request) that does not follow the schema."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Constraints(_Model):
    """Hard conditions on items; an unset field does not constrain. Reused by the API's request."""

    price_min: float | None = Field(
        None, ge=0, le=PRICE_MAX, allow_inf_nan=False, description="lowest price allowed (inclusive)"
    )
    price_max: float | None = Field(
        None, ge=0, le=PRICE_MAX, allow_inf_nan=False, description="highest price allowed (inclusive)"
    )
    attributes: list[str] = Field(
        default_factory=list, max_length=32, description="attribute ids every item must have"
    )

    @model_validator(mode="after")
    def _ordered(self) -> Constraints:
        if self.price_min is not None and self.price_max is not None and self.price_min > self.price_max:
            raise ValueError(f"price_min ({self.price_min}) is above price_max ({self.price_max})")
        return self

    @property
    def empty(self) -> bool:
        return self.price_min is None and self.price_max is None and not self.attributes


class Request(_Model):
    """What the user asked for: a category (or none), hard constraints, optional free text."""

    category: str | None = None
    constraints: Constraints = Constraints()
    text: str | None = Field(None, max_length=2000)


def _tool_required(schema: dict[str, Any]) -> None:
    # ``tool`` has a default so that code can write Search(...), but JSON must always name it.
    schema["required"] = ["tool", *[r for r in schema.get("required", []) if r != "tool"]]


class _Action(_Model):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_tool_required)


class Search(_Action):
    """Rank the catalogue (optionally one category) by a catalogue signal; keep the top ``k``
    items that satisfy ``constraints``. Replaces the current candidate list."""

    tool: Literal["search"] = "search"
    category: str | None = Field(None, description="only items of this category (null: all)")
    strategy: Strategy = "popularity"
    constraints: Constraints = Constraints()
    attributes: list[str] = Field(
        default_factory=list, max_length=32, description="soft: attribute_match ranks by overlap with these"
    )
    k: int = Field(20, ge=1, le=MAX_ITEMS, description="candidates returned (the env may bound it lower)")


class Filter(_Action):
    """Keep only the current candidates that satisfy ``constraints`` (order kept)."""

    tool: Literal["filter"] = "filter"
    constraints: Constraints


class Recommend(_Action):
    """The slate, best first, by external item id; ends the episode."""

    tool: Literal["recommend"] = "recommend"
    items: list[str] = Field(min_length=1, max_length=MAX_ITEMS)


Action = Annotated[Search | Filter | Recommend, Field(discriminator="tool")]
_ADAPTER: TypeAdapter[Search | Filter | Recommend] = TypeAdapter(Action)


def action_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one action, with its version in ``$id`` and ``version``."""
    schema = _ADAPTER.json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://parpo.dev/schemas/action/v{ACTION_SCHEMA_VERSION}.json",
        "title": "PARPO agent action",
        "version": ACTION_SCHEMA_VERSION,
        **schema,
    }


def parse_action(
    data: str | bytes | dict[str, Any] | Search | Filter | Recommend,
) -> Search | Filter | Recommend:
    """A typed action from JSON text, a mapping or an action; ``ActionError`` names the bad field."""
    if isinstance(data, Search | Filter | Recommend):
        return data
    try:
        obj = json.loads(data) if isinstance(data, str | bytes) else data
    except ValueError as e:
        raise ActionError(f"action is not valid JSON ({e})") from None
    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ActionError(f"action: {where + ': ' if where else ''}{err['msg']}") from None


def action_to_json(action: Search | Filter | Recommend) -> dict[str, Any]:
    """The action as plain JSON data (what an LLM would emit); ``parse_action`` inverts it."""
    return action.model_dump(mode="json")
