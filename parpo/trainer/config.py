"""The ``policy`` config group (``configs/policy/*.yaml``): environment, policy model, algorithm
and the training loop. ``parpo policy train --algo gdpo --group-size 2`` and dotted overrides
(``train.updates=50``) change one key; every key is validated here."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from parpo.algorithms.config import AdvantageConfig, LossConfig, OptimConfig, ShapingConfig, ValueConfig
from parpo.env.config import EnvConfig
from parpo.memory.config import MemoryConfig
from parpo.policy.config import NativePolicyConfig
from parpo_core.config import RuntimeConfig, StrictModel


class TrainLoopConfig(StrictModel):
    """Tasks -> G rollouts per task -> advantages -> ``ppo_epochs`` over minibatches -> anchors."""

    updates: int = Field(60, ge=1, description="policy updates (each on fresh rollouts)")
    tasks_per_update: int = Field(
        128, ge=1, description="training tasks per update (global, split over ranks)"
    )
    group_size: int = Field(8, ge=1, description="G: rollouts per task (one advantage group)")
    ppo_epochs: int = Field(2, ge=1, description="passes over each update's rollouts")
    minibatches: int = Field(4, ge=1, description="optimiser steps per PPO epoch (equal on every rank)")
    micro_batches: int = Field(
        4, ge=1, description="gradient-accumulation chunks per minibatch, by candidate count (less padding)"
    )
    max_grad_norm: float | None = Field(1.0, gt=0, description="gradient clipping (null: off)")
    order: Literal["joint", "actor_then_critic", "single_rollout"] = Field(
        "joint",
        description="joint: the critic (value-based estimators) is fitted on the same minibatches as the "
        "actor; actor_then_critic (PACT): the actor's epochs first, then the critic's, on the rollouts "
        "reweighted by the updated actor's importance ratio; single_rollout (SAO): as joint, with the "
        "rollouts collected in a background thread while the trainer updates (staleness max_staleness)",
    )
    max_staleness: int = Field(
        1,
        ge=0,
        description="single_rollout: update u trains on rollouts of the weights after max(0, u - max_staleness) "
        "updates (0: synchronous)",
    )
    checkpoint_every: int = Field(0, ge=0, description="also keep update-<N>.ckpt every N updates (0: off)")
    progress_bar: bool = Field(True, description="show a progress bar over updates")


class PolicyTrainConfig(StrictModel):
    runtime: RuntimeConfig = RuntimeConfig()
    env: EnvConfig = EnvConfig()
    policy: NativePolicyConfig = NativePolicyConfig()
    advantage: AdvantageConfig = AdvantageConfig()
    loss: LossConfig = LossConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainLoopConfig = TrainLoopConfig()
    #: the skill graph memory, built and written back when ``policy.memory_skills`` > 0
    memory: MemoryConfig = MemoryConfig()
    value: ValueConfig = Field(
        ValueConfig(), description="value-based credit and critic (when advantage.estimator names one)"
    )
    shaping: ShapingConfig | None = Field(
        None, description="clipped penalties for over-long episodes and invalid calls (null: none)"
    )

    @model_validator(mode="before")
    @classmethod
    def _dr_grpo_loss(cls, data: Any) -> Any:
        """Dr. GRPO is an estimator *and* a loss aggregation (no per-length normalisation): naming
        the estimator (in YAML, an override or ``--algo``) selects the aggregation too, unless the
        config sets one explicitly."""
        if isinstance(data, dict) and (data.get("advantage") or {}).get("estimator") == "dr_grpo":
            loss = dict(data.get("loss") or {})
            loss.setdefault("aggregation", "dr_grpo")
            data = {**data, "loss": loss}
        return data

    @model_validator(mode="after")
    def _dr_grpo_norm_len(self) -> PolicyTrainConfig:
        if self.loss.aggregation == "dr_grpo" and self.loss.norm_len is None:
            from parpo.policy.tokens import HEAD

            # The generation budget of one step: every decision slot plus a full slate of pointers.
            loss = self.loss.model_copy(update={"norm_len": HEAD + self.policy.max_k})
            object.__setattr__(self, "loss", loss)  # frozen: set once, during validation
        return self

    @property
    def value_based(self) -> bool:
        """Whether ``advantage.estimator`` names a value-based estimator (a critic is trained)."""
        from parpo.algorithms.gae import VALUE_ESTIMATORS

        return self.advantage.estimator in VALUE_ESTIMATORS

    @model_validator(mode="after")
    def _critic(self) -> PolicyTrainConfig:
        """``advantage.estimator`` is the one selector: a value-based name turns on the value head
        and becomes ``value.estimator``."""
        from parpo.algorithms.config import select_value

        value_set = "estimator" in self.value.model_fields_set
        value = select_value(self.advantage, self.value, value_set, self.train.order)
        if value is None:
            return self
        if self.train.order == "single_rollout" and self.runtime.devices > 1:
            raise ValueError("train.order single_rollout runs on one process (runtime.devices=1)")
        if self.train.order == "single_rollout" and self.policy.memory_skills:
            # the rollout thread would retrieve from the graph while the trainer writes to it
            raise ValueError(
                "train.order single_rollout does not take the skill memory (policy.memory_skills=0)"
            )
        # frozen models: set once, during validation
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "policy", self.policy.model_copy(update={"value_head": True}))
        return self

    @model_validator(mode="after")
    def _shaping_weights(self) -> PolicyTrainConfig:
        from parpo.algorithms.config import shaping_weights

        object.__setattr__(self, "advantage", shaping_weights(self.advantage, self.shaping))
        return self

    @model_validator(mode="after")
    def _fits(self) -> PolicyTrainConfig:
        if self.policy.max_candidates < self.env.search_k:
            raise ValueError(
                f"policy.max_candidates ({self.policy.max_candidates}) must be at least env.search_k "
                f"({self.env.search_k}): the pointer head has to see every candidate"
            )
        self.memory.check_shown(self.policy.memory_skills)
        if self.policy.max_k < self.env.k:
            raise ValueError(f"policy.max_k ({self.policy.max_k}) must be at least env.k ({self.env.k})")
        return self
