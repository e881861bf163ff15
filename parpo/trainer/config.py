"""The ``policy`` config group (``configs/policy/*.yaml``): environment, policy model, algorithm
and the training loop. ``parpo policy train --algo gdpo --group-size 2`` and dotted overrides
(``train.updates=50``) change one key; every key is validated here."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from parpo.algorithms.config import AdvantageConfig, LossConfig, OptimConfig
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

    @model_validator(mode="after")
    def _fits(self) -> PolicyTrainConfig:
        if self.policy.max_candidates < self.env.search_k:
            raise ValueError(
                f"policy.max_candidates ({self.policy.max_candidates}) must be at least env.search_k "
                f"({self.env.search_k}): the pointer head has to see every candidate"
            )
        if self.policy.memory_skills > self.memory.k:
            raise ValueError(
                f"policy.memory_skills ({self.policy.memory_skills}) must be at most memory.k "
                f"({self.memory.k}): the policy sees the skills one retrieval returns"
            )
        if self.policy.max_k < self.env.k:
            raise ValueError(f"policy.max_k ({self.policy.max_k}) must be at least env.k ({self.env.k})")
        return self
