"""Fast reward-model settings and a DICE version published on the tiny world."""

from __future__ import annotations

from pathlib import Path

import pytest

#: Fast, deterministic training settings for the tests (one intra-op thread, no progress bar).
FAST = [
    "runtime.threads=1",
    "runtime.device=cpu",
    "train.progress_bar=false",
    "train.batch_size=256",
    "train.epochs=3",
    "train.eval_every_steps=4",
    "model.dim=8",
    "model.dcor_sample=32",
    "eval.ks=[10,20]",
    "eval.spearman_items=20",
]


def reward_config(*overrides: str, preset: str = "dice"):
    from parpo.presets import load
    from reward_models.config import RewardConfig

    return load(RewardConfig, "reward", preset, [*FAST, *overrides])


@pytest.fixture(scope="session")
def published_reward(tiny_synth, tmp_path_factory) -> Path:
    """REG holding one DICE version trained for 3 epochs on ``tiny_synth`` (production)."""
    from reward_models.pipeline import train_and_publish

    root = tmp_path_factory.mktemp("env-reg")
    assert train_and_publish(reward_config(), tiny_synth, root / "REG", root / "run", label="dice")
    return root / "REG"
