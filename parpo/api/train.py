"""Training: ``train_reward`` and ``train_policy`` publish a new version to a registry (the jobs of
``parpo reward train`` and ``parpo policy train``, which call ``publish_reward`` and
``publish_policy`` below)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from parpo.api._common import Config, config_of, environment_kept, preset_label

if TYPE_CHECKING:
    from parpo.trainer.pipeline import PolicyOutcome
    from reward_models.pipeline import TrainOutcome


def train_reward(
    *,
    data: str | Path,
    registry: str | Path,
    run_dir: str | Path,
    config: Config = None,
    split: str | None = None,
    overrides: list[str] | None = None,
    resume: str | Path | None = None,
) -> TrainOutcome | None:
    """Train a reward model (``config``: a ``reward`` preset, ``dice`` by default, or a YAML file
    or ``RewardConfig``) on the split ``split`` (default: the config's) of the dataset ``data``,
    evaluate it and publish it to ``registry`` as a new ``reward`` version. Logs, checkpoints and
    the resolved ``config.yaml`` go to ``run_dir``; ``resume`` continues from a checkpoint there.
    Returns the published version, its metrics and the training summary (None on the DDP ranks
    other than 0 that ``runtime.devices`` > 1 starts: rank 0 publishes)."""
    cfg = config_of(
        "reward", config, [*(overrides or []), *([f"split.name={split}"] if split else [])] or None
    )
    return _kept(
        "reward", publish_reward, cfg, data, registry, Path(run_dir), resume, preset_label(config, "dice")
    )


def train_policy(
    *,
    data: str | Path,
    registry: str | Path,
    run_dir: str | Path,
    reward_version: str | None = None,
    config: Config = None,
    overrides: list[str] | None = None,
    resume: str | Path | None = None,
) -> PolicyOutcome | None:
    """Train an agent policy (``config``: a ``policy`` preset, ``default`` by default, or a YAML
    file or ``PolicyTrainConfig``) against ``reward_version`` of ``registry`` (default: its
    production version) on that version's split of ``data``, and publish it as a new ``policy``
    version. Logs, checkpoints and the resolved ``config.yaml`` go to ``run_dir``. Returns the
    published version and the means of the last updates' metrics (``summary``); None on DDP
    ranks other than 0."""
    cfg = config_of("policy", config, overrides)
    label = preset_label(config, "default")
    return _kept("policy", publish_policy, cfg, data, registry, reward_version, Path(run_dir), resume, label)


def _kept(kind: str, job: Any, *args: Any) -> Any:
    """``job(*args)`` with the run-folder variable it exports removed again afterwards."""
    from parpo_core.runs import run_dir_env

    with environment_kept(run_dir_env(kind)):
        return job(*args)


def publish_reward(
    cfg: Any,
    data: str | Path,
    registry: str | Path,
    run_dir: Path | None,
    resume: str | Path | None,
    label: str,
) -> TrainOutcome | None:
    """Train, evaluate, publish and write the resolved config into the run folder; None on DDP
    ranks other than 0. ``run_dir`` None: the ``parpo_core.runs`` default (the CLI's)."""
    from parpo.presets import write_resolved
    from reward_models.pipeline import train_and_publish

    outcome = train_and_publish(cfg, data, registry, run_dir, resume=resume, label=label)
    if outcome is not None:
        write_resolved(cfg, outcome.run_dir / "config.yaml")
    return outcome


def publish_policy(
    cfg: Any,
    data: str | Path,
    registry: str | Path,
    reward_version: str | None,
    run_dir: Path | None,
    resume: str | Path | None,
    preset: str,
) -> PolicyOutcome | None:
    """Train and publish a policy and write the resolved config into the run folder; None on
    DDP ranks other than 0."""
    from parpo.presets import write_resolved
    from parpo.trainer.pipeline import train_and_publish
    from parpo_core.runs import is_rank_zero

    outcome = train_and_publish(
        cfg, data, registry, reward_version=reward_version, run_dir=run_dir, resume=resume, preset=preset
    )
    if outcome is None or not is_rank_zero():
        return None
    write_resolved(cfg, outcome.run_dir / "config.yaml")
    return outcome
