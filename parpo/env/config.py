"""The ``env`` config group (``configs/env/*.yaml``): episode rules, task construction, reporting.

``task_weights`` only define the reported ``task_quality`` (a fixed yardstick shared by every
agent and every algorithm); the trainer's advantage weights live in the algorithm config.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from parpo.env.schema import MAX_ITEMS
from parpo_core.config import StrictModel

#: Task components (``task/<name>``), in the order they are reported.
TASK_COMPONENTS: tuple[str, ...] = ("constraints", "items_valid", "valid_calls", "efficiency")


class PriceCapConfig(StrictModel):
    """Price cap of a request: ``cap = price(target) * U(low, high)``, drawn per task with prob ``p``.

    ``low >= 1`` keeps the held-out item itself feasible; items the user likes more may still be
    over the cap, so preference and constraints can pull apart.
    """

    p: float = Field(1.0, ge=0, le=1, description="probability that a request carries a cap")
    low: float = Field(1.0, ge=1, description="lowest cap as a multiple of the target's price")
    high: float = Field(1.5, ge=1, description="highest cap as a multiple of the target's price")

    @model_validator(mode="after")
    def _ordered(self) -> PriceCapConfig:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) is above high ({self.high})")
        return self


class TaskConfig(StrictModel):
    """How tasks are drawn from a split's parts (one task per held-out positive, subsampled)."""

    per_user_train: int = Field(4, ge=1, description="at most this many training tasks per user")
    per_user_eval: int = Field(1, ge=1, description="at most this many warm/cold eval tasks per user")
    max_eval: int = Field(
        1000,
        ge=1,
        description="at most this many warm (and cold) tasks from EnvSource.tasks; `parpo policy eval` "
        "draws every task and samples its own (parpo.evaluation.sample)",
    )
    attributes: int = Field(
        1,
        ge=0,
        description="attribute ids of the target put into the constraints when items have no category (Amazon)",
    )
    price_cap: PriceCapConfig = PriceCapConfig()
    open_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="probability that a request drops the target's category/attributes (an open "
        "request: price cap only or empty, like many API requests); targets with neither are always open",
    )
    seed: int = Field(0, description="seeds the task subsample, the price caps and the open requests")


class EnvConfig(StrictModel):
    k: int = Field(10, ge=1, le=MAX_ITEMS, description="slate size K (a task may set its own)")
    max_steps: int = Field(4, ge=2, description="steps before an episode is truncated")
    search_k: int = Field(50, ge=1, le=MAX_ITEMS, description="bound on a search's candidate list")
    task_weights: dict[str, float] = Field(
        default_factory=lambda: {
            "constraints": 0.5,
            "items_valid": 0.2,
            "valid_calls": 0.2,
            "efficiency": 0.1,
        },
        description="weights of task/<name> in the reported task_quality (non-negative, sum 1)",
    )
    tasks: TaskConfig = TaskConfig()
    seed: int = Field(0, description="seeds the baselines' random choices")

    @model_validator(mode="after")
    def _weights(self) -> EnvConfig:
        unknown = sorted(set(self.task_weights) - set(TASK_COMPONENTS))
        if unknown:
            raise ValueError(
                f"task_weights: unknown component(s) {unknown}; choose from {list(TASK_COMPONENTS)}"
            )
        if any(w < 0 for w in self.task_weights.values()):
            raise ValueError("task_weights must be non-negative")
        if abs(sum(self.task_weights.values()) - 1.0) > 1e-9:
            raise ValueError(
                f"task_weights must sum to 1 so that task_quality lies in [0, 1] (sum {sum(self.task_weights.values())})"
            )
        return self
