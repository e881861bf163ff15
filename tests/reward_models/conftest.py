"""A tiny synthetic dataset (truth + uniform_test) shared by the reward-model tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_pipelines.synth import SynthConfig, write

TINY = SynthConfig(n_users=120, n_items=160, seed=3, rounds=8)

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


@pytest.fixture(scope="session")
def tiny_synth(tmp_path_factory) -> Path:
    """DIR of a 120-user x 160-item synthetic dataset with its splits (seed 0)."""
    out = tmp_path_factory.mktemp("reward-synth") / "data"
    write(TINY, out)
    return out


def reward_config(*overrides: str, preset: str = "dice"):
    from parpo.presets import load
    from reward_models.config import RewardConfig

    return load(RewardConfig, "reward", preset, [*FAST, *overrides])
