"""A registry with two tiny trained policy versions (production: the first) for serving tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.parpo.env.conftest import published_reward  # noqa: F401  (shared fixtures)
from tests.parpo.trainer.conftest import FAST_OVERRIDES
from tests.reward_models.conftest import tiny_synth  # noqa: F401

FAST = [*FAST_OVERRIDES, "train.updates=1"]


@pytest.fixture(scope="session")
def serve_registry(tiny_synth, published_reward, tmp_path_factory) -> tuple[Path, list[str]]:  # noqa: F811
    """(REG, [v1, v2]): two policies trained for one update each, seeds 0 and 1."""
    from parpo.presets import load
    from parpo.trainer.config import PolicyTrainConfig
    from parpo.trainer.pipeline import train_and_publish

    root = tmp_path_factory.mktemp("serve-reg")
    reg = root / "REG"
    shutil.copytree(published_reward, reg)
    names = []
    for seed in (0, 1):
        cfg = load(PolicyTrainConfig, "policy", "default", [*FAST, f"runtime.seed={seed}"])
        names.append(train_and_publish(cfg, tiny_synth, reg, run_dir=root / f"run{seed}").version.name)
    return reg, names
