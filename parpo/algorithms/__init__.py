"""PARPO algorithms: advantages, user anchors, losses, KL and aggregation as small pure tensor
functions in registries (``ADVANTAGES``, ``LOSSES``, ``AGGREGATIONS``, ``KL``). See
``docs/parpo-algorithms.md``."""

from parpo.algorithms.advantages import ADVANTAGES, AdvantageFn, compute_advantages
from parpo.algorithms.aggregation import AGGREGATIONS, AggregationFn
from parpo.algorithms.anchor_io import load_anchors, save_anchors
from parpo.algorithms.anchor_sync import all_gather_user_batch_stats, broadcast_anchors
from parpo.algorithms.anchors import (
    AnchorSnapshot,
    AnchorStore,
    UserBatchStats,
    merge_user_batch_stats,
    user_batch_stats,
)
from parpo.algorithms.config import AdvantageConfig, LossConfig, OptimConfig
from parpo.algorithms.kl import KL, KLFn, kl_reward_penalty
from parpo.algorithms.losses import LOSSES, LossFn, compute_loss, tis_weights
from parpo.algorithms.optim import build_optimizers, split_params
from parpo.algorithms.stats import GroupStats, group_mean_std, whiten

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL",
    "LOSSES",
    "AdvantageConfig",
    "AdvantageFn",
    "AggregationFn",
    "AnchorSnapshot",
    "AnchorStore",
    "GroupStats",
    "KLFn",
    "LossConfig",
    "LossFn",
    "OptimConfig",
    "UserBatchStats",
    "all_gather_user_batch_stats",
    "broadcast_anchors",
    "load_anchors",
    "save_anchors",
    "build_optimizers",
    "compute_advantages",
    "compute_loss",
    "group_mean_std",
    "kl_reward_penalty",
    "merge_user_batch_stats",
    "split_params",
    "tis_weights",
    "user_batch_stats",
    "whiten",
]
