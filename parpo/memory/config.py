"""``MemoryConfig``: the skill graph memory's sizes, thresholds and score weights (docs/memory.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from parpo_core.config import StrictModel


class MemoryConfig(StrictModel):
    """Validated once; every number here is named in docs/memory.md."""

    retriever: Literal["psgm", "flat", "none"] = Field("psgm", description="retrieval: graph, flat or off")
    k: int = Field(4, ge=1, le=64, description="skills returned per request")
    dim: int = Field(64, ge=8, le=1024, description="width of the hashed scenario embedding")
    capacity: int = Field(100_000, ge=1, description="most skills kept; past it the eviction rule applies")
    merge_threshold: float = Field(
        0.92, gt=0.0, le=1.0, description="cosine at or above which a new skill merges into an old one"
    )
    top_quantile: float = Field(
        0.8,
        ge=0.5,
        lt=1.0,
        description="without an anchor: a reward must pass this batch quantile (and a "
        "low-value one stay under 1 - it)",
    )
    high_value_rule: Literal["strict", "pareto"] = Field(
        "pareto",
        description="pareto: at or above every threshold and above one (a component most of a batch "
        "tops out on no longer blocks distillation); strict: above every one (memories saved before "
        "the option keep it)",
    )
    trajectories_per_skill: int = Field(4, ge=1, description="latest source trajectories kept per skill")
    links_per_skill: int = Field(32, ge=1, description="complement/conflict links kept per skill")
    eviction_horizon: float = Field(
        50.0, gt=0.0, description="updates over which an unused skill's support decays by 1/e"
    )
    # -- communities
    resolutions: tuple[float, float] = Field((0.25, 1.0), description="Leiden resolutions: coarse, fine")
    refresh_every: int = Field(
        10_000, ge=1, description="most edge updates between full Leiden runs (between: neighbour vote)"
    )
    seed: int = Field(0, description="Leiden's seed")
    # -- retrieval fan-out caps (bound the work per request whatever the graph's size)
    seed_scenarios: int = Field(3, ge=1, description="nearest scenarios whose skills are scanned")
    seeds: int = Field(16, ge=1, description="seed skills kept after recall")
    users_per_skill: int = Field(8, ge=1, description="heaviest users followed from a seed")
    skills_per_user: int = Field(8, ge=1, description="heaviest skills followed from a user")
    # -- score weights: similarity + user relevance + complement - conflict + community - diversity
    w_similarity: float = Field(1.0, ge=0.0, description="weight of the request-skill cosine")
    w_user: float = Field(1.0, ge=0.0, description="weight of the skill's relevance to the user")
    w_complement: float = Field(0.3, ge=0.0, description="weight of complement links to the context")
    w_conflict: float = Field(0.5, ge=0.0, description="weight of conflict links to the context (subtracted)")
    w_community: float = Field(
        0.3, ge=0.0, description="weight of the context's share of the skill's community"
    )
    w_diversity: float = Field(
        0.5, ge=0.0, description="weight of the cosine to skills already picked (subtracted)"
    )
    cold_affinity: float = Field(
        0.5, ge=0.0, le=1.0, description="affinity given to other users when the user has no history"
    )

    def check_shown(self, memory_skills: int) -> None:
        """``ValueError`` when a policy would show more skills (``policy.memory_skills``) than one
        retrieval returns (``k``): it would silently see fewer."""
        if memory_skills > self.k:
            raise ValueError(
                f"policy.memory_skills ({memory_skills}) must be at most memory.k "
                f"({self.k}): the policy sees the skills one retrieval returns"
            )
