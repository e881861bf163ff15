"""The ``policy`` model config: the native backend's architecture and sampling temperature."""

from __future__ import annotations

from pydantic import Field

from parpo.env.schema import MAX_ITEMS
from parpo_core.config import StrictModel


class NativePolicyConfig(StrictModel):
    """A small transformer over [state, past calls, candidates] with tool, argument and pointer heads."""

    dim: int = Field(32, ge=8, description="model width")
    heads: int = Field(4, ge=1, description="attention heads (dim must be divisible by heads)")
    layers: int = Field(2, ge=1, description="transformer encoder layers")
    ffn: int = Field(4, ge=1, description="feed-forward width as a multiple of dim")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout in the transformer layers")
    item_embeddings: bool = Field(
        True, description="learn an embedding per catalogue item (the policy's own, not the reward model's)"
    )
    max_k: int = Field(10, ge=1, le=MAX_ITEMS, description="largest slate the pointer head fills")
    max_candidates: int = Field(50, ge=1, le=MAX_ITEMS, description="candidate slots (>= the env's search_k)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of training rollouts")
    personal_features: bool = Field(
        True,
        description="add the reward model's scores of each candidate for the user (interest percentile, "
        "interest and conformity z-scores, scored flag) to its features; false for the ablation "
        "(policies saved before the option existed load with false)",
    )
    memory_skills: int = Field(
        0,
        ge=0,
        le=16,
        description="retrieved skills the policy sees as extra tokens (parpo.memory; needs the trainer's "
        "memory); 0: no memory tokens, the network of policies saved before the option existed",
    )
    value_head: bool = Field(
        False,
        description="a value head on the state token (one value per step) for the value-based estimators; "
        "set by the trainer when advantage.estimator is one of them (policies saved before it load without)",
    )
