"""Request and response bodies of the HTTP API (pydantic; unknown fields are 422).

The request's ``constraints`` is the action schema's ``Constraints`` and the plan is made of
the schema's typed actions (``parpo.env.schema``), so the API, the environment and every
policy backend speak one language.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from parpo.env.schema import MAX_ITEMS, Constraints, Filter, Recommend, Search

#: Smallest sampling temperature: below it logits / tau overflow float32 (0 itself means greedy).
MIN_TEMPERATURE = 0.01
MAX_EVENTS = 1000
MAX_BATCH = 256
EventKind = Literal["impression", "click", "cart", "fav", "buy"]
Id = Field(min_length=1, max_length=256)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RequestBody(_Body):
    category: str | None = Field(None, max_length=256)
    constraints: Constraints | None = None
    text: str | None = Field(None, max_length=2000)


class ActRequest(_Body):
    request_id: str = Id
    user_id: str = Id
    request: RequestBody = RequestBody()
    candidates: list[str] | None = Field(None, max_length=10_000)
    k: int = Field(10, ge=1, le=MAX_ITEMS)
    context: dict[str, Any] | None = None
    explore: float | None = Field(
        None,
        ge=0,
        le=100,
        description=f"sampling temperature, 0 or at least {MIN_TEMPERATURE}; 0: greedy (evaluable: false); "
        "null: the serve config's",
    )
    deadline_ms: int | None = Field(None, ge=1, le=600_000)

    @field_validator("explore")
    @classmethod
    def _temperature(cls, v: float | None) -> float | None:
        if v is not None and 0 < v < MIN_TEMPERATURE:
            raise ValueError(f"must be 0 (greedy) or at least {MIN_TEMPERATURE}")
        return v


class ActBatchRequest(_Body):
    requests: list[ActRequest] = Field(min_length=1, max_length=MAX_BATCH)


class SlateItem(BaseModel):
    item_id: str
    position: int = Field(description="1-based")
    score: float = Field(description="the reward model's click score (interest + conformity)")
    interest: float
    conformity: float
    cold: bool = Field(description="the user or the item was scored through the cold path")
    propensity: float = Field(description="P(this item at this position | request), Monte Carlo over N")


class ActResponse(BaseModel):
    request_id: str
    policy_version: str
    reward_version: str
    action_schema_version: int
    plan: list[Search | Filter | Recommend]
    slate: list[SlateItem]
    evaluable: bool = Field(description="false when greedy or a fallback: propensities are not a policy's")
    explore: float = Field(description="temperature used (0: greedy)")
    n_samples: int = Field(description="N behind the propensities")
    cold_user: bool
    unknown_candidates: list[str] = Field(default_factory=list)
    fallback: Literal["popularity"] | None = None
    fallback_reason: Literal["deadline", "no_slate"] | None = None


class ActBatchResponse(BaseModel):
    responses: list[ActResponse]


class Event(_Body):
    request_id: str = Id
    position: int = Field(ge=1, le=MAX_ITEMS, description="1-based slate position")
    event: EventKind
    item_id: str | None = Field(None, max_length=256)
    user_id: str | None = Field(None, max_length=256)
    ts: float | None = Field(None, description="Unix seconds of the user action (server time when null)")
    value: float | None = None
    event_id: str | None = Field(None, min_length=1, max_length=256)


class EventBatch(_Body):
    events: list[Event] = Field(min_length=1, max_length=MAX_EVENTS)


class EventResult(BaseModel):
    event_id: str | None
    stored: bool = Field(description="false: this event_id was already stored (idempotent repeat)")
    duplicate: bool = Field(description="the same (request_id, position, event) was stored before")
    unknown_request: bool
    item_mismatch: bool


class EventsResponse(BaseModel):
    accepted: int
    results: list[EventResult]


class ModelInfo(BaseModel):
    policy_version: str
    reward_version: str
    loaded_at: float
    follows: str | None = Field(description="registry pointer followed by polling (null: pinned)")


class ModelsResponse(BaseModel):
    serving: ModelInfo | None
    reloading: str | None


class ReloadRequest(_Body):
    version: str | None = Field(None, description="version name or pointer; null: the followed pointer")


class ErrorBody(BaseModel):
    detail: str | list[dict[str, Any]]
