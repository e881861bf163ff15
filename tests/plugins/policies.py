"""Fast policy-training settings, a registry with two tiny trained policy versions, and a spy on
a trainer's rollout collection."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import pytest

from parpo.trainer.config import PolicyTrainConfig

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


#: One update: enough for a policy version to exist (serving and evaluation tests).
SERVE_FAST = [*FAST_OVERRIDES, "train.updates=1"]


@pytest.fixture(scope="session")
def serve_registry(tiny_synth, published_reward, tmp_path_factory) -> tuple[Path, list[str]]:
    """(REG, [v1, v2]): two policies trained for one update each, seeds 0 and 1; v1 without the
    personal features (as policies published before them), v2 with them, so serving runs both."""
    from parpo.presets import load
    from parpo.trainer.pipeline import train_and_publish

    root = tmp_path_factory.mktemp("serve-reg")
    reg = root / "REG"
    shutil.copytree(published_reward, reg)
    names = []
    for seed in (0, 1):
        personal = f"policy.personal_features={'true' if seed else 'false'}"
        cfg = load(PolicyTrainConfig, "policy", "default", [*SERVE_FAST, f"runtime.seed={seed}", personal])
        names.append(train_and_publish(cfg, tiny_synth, reg, run_dir=root / f"run{seed}").version.name)
    return reg, names


def record_drawn_tasks(monkeypatch: pytest.MonkeyPatch, trainer: ModuleType) -> list[list[str]]:
    """Spy on ``trainer.collect`` (the module a trainer collects rollouts through): the task ids of
    every batch it collects, in order, appended to the returned list."""
    drawn: list[list[str]] = []
    real = trainer.collect

    def keep(policy, env, tasks, *a, **kw):
        drawn.append([t.task_id for t in tasks])
        return real(policy, env, tasks, *a, **kw)

    monkeypatch.setattr(trainer, "collect", keep)
    return drawn
