"""Stage-2 reward model: interest/conformity causal embeddings on an MF or LightGCN backbone."""

from reward_models.model.embeddings import BRANCHES, BatchScores, CausalEmbeddings, Tables, popularity_buckets
from reward_models.model.graph import normalized_adjacency, propagate

__all__ = [
    "BRANCHES",
    "BatchScores",
    "CausalEmbeddings",
    "Tables",
    "normalized_adjacency",
    "popularity_buckets",
    "propagate",
]
