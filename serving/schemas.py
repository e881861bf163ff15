"""Request and response bodies of the HTTP API (pydantic; unknown fields are 422).

The request's ``constraints`` is the action schema's ``Constraints`` and the plan is made of
the schema's typed actions (``parpo.env.schema``), so the API, the environment and every
policy backend speak one language.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictFloat,
    StrictInt,
    Tag,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)

from parpo.env.schema import MAX_ITEMS, Constraints, Filter, Recommend, Search
from parpo_core.limits import ID_FORBIDDEN, ID_MAX_CHARS, VALUE_MAX, id_problem, ts_bounds

#: Smallest sampling temperature: below it logits / tau overflow float32 (0 itself means greedy).
MIN_TEMPERATURE = 0.01
MAX_EVENTS = 1000
MAX_BATCH = 256
#: Deepest nesting of a request's ``context`` (it is stored in the decision log as JSON).
MAX_CONTEXT_DEPTH = 32
EventKind = Literal["impression", "click", "cart", "fav", "buy"]


def _valid_id(v: str) -> str:
    problem = id_problem(v)
    if problem is not None:
        raise ValueError(f"id {problem}")
    return v


#: A user, item, request or event id: the ingest's id rule (``parpo_core.limits``), so an id the
#: API accepts is never rejected when its log is ingested.
Id = Annotated[
    str,
    Field(
        min_length=1,
        max_length=ID_MAX_CHARS,
        description=f"1..{ID_MAX_CHARS} characters, no control characters ({ID_FORBIDDEN}), "
        "no white space at either end",
    ),
    AfterValidator(_valid_id),
]


def _valid_ts(v: float | None) -> float | None:
    if v is None:
        return v
    lo, hi = ts_bounds()
    if not lo.timestamp() <= v <= hi.timestamp():
        raise ValueError(
            f"must be Unix seconds in [{lo.timestamp():.0f}, {hi.timestamp():.0f}] (now + 1 day)"
        )
    return v


def _shallow(v: dict[str, Any] | None) -> dict[str, Any] | None:
    """``v`` unless it nests deeper than ``MAX_CONTEXT_DEPTH`` (walked without recursion)."""
    level: list[Any] = [v] if v is not None else []
    for _ in range(MAX_CONTEXT_DEPTH):
        level = [
            c for x in level for c in (x.values() if isinstance(x, dict) else x) if isinstance(c, dict | list)
        ]
    if level:
        raise ValueError(f"nests deeper than {MAX_CONTEXT_DEPTH} levels")
    return v


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class RequestBody(_Body):
    category: str | None = Field(None, max_length=256)
    constraints: Constraints | None = None
    text: str | None = Field(None, max_length=2000)


class ActRequest(_Body):
    request_id: Id
    user_id: Id
    request: RequestBody = RequestBody()
    candidates: list[Id] | None = Field(None, max_length=10_000)
    k: StrictInt = Field(10, ge=1, le=MAX_ITEMS)
    context: Annotated[dict[str, Any] | None, AfterValidator(_shallow)] = Field(
        None, description=f"free JSON stored with the decision (at most {MAX_CONTEXT_DEPTH} levels deep)"
    )
    explore: StrictFloat | None = Field(
        None,
        ge=0,
        le=100,
        description=f"sampling temperature, 0 or at least {MIN_TEMPERATURE}; 0: greedy (evaluable: false); "
        "null: the serve config's",
    )
    deadline_ms: StrictInt | None = Field(None, ge=1, le=600_000)

    @field_validator("explore")
    @classmethod
    def _temperature(cls, v: float | None) -> float | None:
        if v is not None and 0 < v < MIN_TEMPERATURE:
            raise ValueError(f"must be 0 (greedy) or at least {MIN_TEMPERATURE}")
        return v


class ActError(BaseModel):
    """One ``:batch`` item that was not served, with the status ``/v1/act`` would have answered."""

    request_id: str | None
    status: int = Field(description="422: the item is invalid; 503: no model, or its model call failed")
    error: str


def _keep_invalid(value: Any, handler: ValidatorFunctionWrapHandler) -> ActRequest | ActError:
    """A ``:batch`` item that fails validation becomes its own 422 answer; the others are served."""
    try:
        return handler(value)
    except ValidationError as e:
        rid = value.get("request_id") if isinstance(value, dict) else None
        return ActError(
            request_id=rid if isinstance(rid, str) else None, status=422, error=error_line(e.errors())
        )


class ActBatchRequest(_Body):
    #: Each item is validated alone (its schema is ``ActRequest``'s): a bad one becomes its
    #: ``ActError`` (422), answered in its slot.
    requests: list[Annotated[ActRequest, WrapValidator(_keep_invalid)]] = Field(
        min_length=1, max_length=MAX_BATCH
    )


class SlateItem(BaseModel):
    item_id: str
    position: int = Field(description="1-based")
    score: float = Field(description="the reward model's click score (interest + conformity)")
    interest: float
    conformity: float
    cold: bool = Field(description="the user or the item was scored through the cold path")
    propensity: float = Field(description="P(this item at this position | request), Monte Carlo over N")


class Slot1(BaseModel):
    low: float = Field(description="exact P(first item first | request) summed over the distinct plans drawn")
    high: float = Field(
        description="low + the probability of the plans no draw took (the true value is between)"
    )


class SkillRef(BaseModel):
    """A skill the policy's memory retrieved for the request (docs/memory.md)."""

    skill_id: int
    scenario: str = Field(
        description="the scenario node the skill applies to (category or kind | price band)"
    )
    plan: list[str] = Field(description="the skill's plan template (call signatures)")
    reason: dict[str, Any] = Field(description="how it was reached (via, path) and its score terms")


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
    slot1_propensity: Slot1 | None = Field(
        None, description="bounds on the first slot's exact propensity (sampled answers of the native policy)"
    )
    logged: bool = Field(
        True,
        description="false: the decision log is failing and this decision was not stored (not evaluable)",
    )
    skills: list[SkillRef] | None = Field(
        None,
        description="skills the policy's memory retrieved for this request; null: a policy without memory",
    )


class ActBatchResponse(BaseModel):
    responses: list[ActResponse | ActError] = Field(description="one per request, in order")
    failed: int = Field(description="how many responses are errors")


class Event(_Body):
    request_id: Id
    position: StrictInt = Field(ge=1, le=MAX_ITEMS, description="1-based slate position")
    event: EventKind
    item_id: Id | None = None
    user_id: Id | None = None
    ts: Annotated[StrictFloat | None, AfterValidator(_valid_ts)] = Field(
        None, description="Unix seconds of the user action, 1990 .. now + 1 day (server time when null)"
    )
    value: StrictFloat | None = Field(None, ge=-VALUE_MAX, le=VALUE_MAX)
    event_id: Id | None = None


class EventBatch(_Body):
    events: list[Event] = Field(min_length=1, max_length=MAX_EVENTS)


def _events_shape(body: Any) -> str:
    return "batch" if isinstance(body, dict) and "events" in body else "one"


#: ``/v1/events``'s body: ``{"events": [...]}`` or one event; an error names the shape sent,
#: never the other one.
EventsBody = Annotated[
    Annotated[EventBatch, Tag("batch")] | Annotated[Event, Tag("one")], Discriminator(_events_shape)
]


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
    last_error: str | None = Field(
        None,
        description="why the last load (a reload, or the pointer followed) failed; null once one succeeds",
    )


class ReloadRequest(_Body):
    version: str | None = Field(None, description="version name or pointer; null: the followed pointer")


class ErrorBody(BaseModel):
    error: str = Field(description="one readable line")
    detail: str | list[dict[str, Any]]


def error_line(errors: Sequence[Any]) -> str:
    """The first validation problem as one line, ``where: what`` (``/v1/events``'s shape tags left out)."""
    if not errors:
        return "invalid body"
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"] if p not in ("one", "batch"))
    return f"{where}: {first['msg']}" if where else str(first["msg"])
