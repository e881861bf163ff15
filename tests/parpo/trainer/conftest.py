"""The tiny synthetic environment (shared with the env tests) and a fast training config."""

from __future__ import annotations

from parpo.trainer.config import PolicyTrainConfig
from tests.parpo.env.conftest import published_reward, source  # noqa: F401  (shared fixtures)
from tests.reward_models.conftest import tiny_synth  # noqa: F401

#: Small and single-threaded: a few seconds per update on the tiny data.
FAST = {
    "runtime": {"device": "cpu", "threads": 1},
    "policy": {"dim": 16, "heads": 2, "layers": 1},
    "train": {
        "tasks_per_update": 16,
        "group_size": 4,
        "ppo_epochs": 1,
        "minibatches": 2,
        "progress_bar": False,
    },
}


def fast_config(**train: int) -> PolicyTrainConfig:
    data = {**FAST, "train": {**FAST["train"], **train}}
    return PolicyTrainConfig.model_validate(data)
