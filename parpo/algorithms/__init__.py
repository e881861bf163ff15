"""PARPO algorithms: advantages, user anchors, losses, KL and aggregation as small pure tensor
functions in registries (``ADVANTAGES``, ``LOSSES``, ``AGGREGATIONS``, ``KL``), plus value-based
credit (``VALUE_ESTIMATORS``), critic losses (``CRITIC_LOSSES``) and reward shaping. See
``docs/parpo-algorithms.md``."""

from parpo.algorithms.advantages import ADVANTAGES, AdvantageFn, compute_advantages, value_reward
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
from parpo.algorithms.config import AdvantageConfig, LossConfig, OptimConfig, ShapingConfig, ValueConfig
from parpo.algorithms.critic import CRITIC_LOSSES, CriticLossFn, pact_critic_weights
from parpo.algorithms.gae import VALUE_ESTIMATORS, Credit, ValueEstimatorFn, compute_credit, outcome_rewards
from parpo.algorithms.kl import KL, KLFn, kl_reward_penalty
from parpo.algorithms.losses import LOSSES, LossFn, compute_loss, tis_weights, turn_log_ratio
from parpo.algorithms.optim import build_optimizers, split_params
from parpo.algorithms.shaping import INVALID_CALL, OVERLONG, shaping_rewards
from parpo.algorithms.stats import GroupStats, group_mean_std, whiten

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "CRITIC_LOSSES",
    "INVALID_CALL",
    "KL",
    "LOSSES",
    "OVERLONG",
    "VALUE_ESTIMATORS",
    "AdvantageConfig",
    "AdvantageFn",
    "AggregationFn",
    "AnchorSnapshot",
    "AnchorStore",
    "Credit",
    "CriticLossFn",
    "GroupStats",
    "KLFn",
    "LossConfig",
    "LossFn",
    "OptimConfig",
    "ShapingConfig",
    "UserBatchStats",
    "ValueConfig",
    "ValueEstimatorFn",
    "all_gather_user_batch_stats",
    "broadcast_anchors",
    "load_anchors",
    "save_anchors",
    "build_optimizers",
    "compute_advantages",
    "compute_credit",
    "compute_loss",
    "group_mean_std",
    "kl_reward_penalty",
    "merge_user_batch_stats",
    "outcome_rewards",
    "pact_critic_weights",
    "shaping_rewards",
    "split_params",
    "tis_weights",
    "turn_log_ratio",
    "user_batch_stats",
    "value_reward",
    "whiten",
]
