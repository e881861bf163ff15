"""The tiny synthetic environment (shared with the env tests) and a fast training config."""

from __future__ import annotations

from parpo.trainer.config import PolicyTrainConfig
from tests.parpo.env.conftest import published_reward, source  # noqa: F401  (shared fixtures)
from tests.reward_models.conftest import tiny_synth  # noqa: F401

#: Small and single-threaded: a few seconds per update on the tiny data (also used as CLI
#: overrides by the CLI and serving tests; append to change one).
FAST_OVERRIDES = [
    "runtime.device=cpu",
    "runtime.threads=1",
    "policy.dim=16",
    "policy.heads=2",
    "policy.layers=1",
    "train.tasks_per_update=16",
    "train.group_size=4",
    "train.ppo_epochs=1",
    "train.minibatches=2",
    "train.progress_bar=false",
]


def fast_config(**train: int) -> PolicyTrainConfig:
    from parpo.presets import load

    return load(
        PolicyTrainConfig,
        "policy",
        "default",
        [*FAST_OVERRIDES, *(f"train.{k}={v}" for k, v in train.items())],
    )
