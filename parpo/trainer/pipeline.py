"""``train_and_publish``: open the environment of a reward version, train a policy (Fabric, one
process or DDP), publish it as a ``policy`` version with lineage to that reward version."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parpo.algorithms.anchor_io import save_anchors
from parpo.env.environment import PreferenceTransform
from parpo.env.schema import ACTION_SCHEMA_VERSION
from parpo.env.source import EnvSource
from parpo.policy.bundle import ANCHORS, CATALOGUE, KIND, POLICY_DIR
from parpo.policy.llm.config import LLMTrainConfig
from parpo.trainer.config import PolicyTrainConfig
from parpo.trainer.loop import PolicyInit, PolicyTrainer, TrainResult


@dataclass
class PolicyOutcome:
    version: Any  # parpo_core.artefacts.Version
    result: TrainResult
    run_dir: Path
    summary: dict[str, float]


def final_summary(history: list[dict[str, float]], last: int = 5) -> dict[str, float]:
    """Means of the last ``last`` updates' reward and report metrics (what training ended at)."""
    tail = history[-last:]
    keys = [k for k in tail[-1] if k.startswith("report/") or k.startswith("reward/") and k.endswith("/mean")]
    return {k: sum(m.get(k, 0.0) for m in tail) / len(tail) for k in dict.fromkeys(keys)}


def _trainer_class(cfg: Any) -> Any:
    """``PolicyTrainer``, or the LLM backend's trainer for an ``LLMTrainConfig`` (``backend: llm``)."""
    if isinstance(cfg, LLMTrainConfig):
        from parpo.policy.llm.trainer import LLMTrainer

        return LLMTrainer
    return PolicyTrainer


def train_and_publish(
    cfg: PolicyTrainConfig | LLMTrainConfig,
    data_dir: str | Path,
    registry: str | Path,
    *,
    reward_version: str | None = None,
    run_dir: str | Path | None = None,
    resume: str | Path | None = None,
    preset: str | None = None,
    preference_transform: PreferenceTransform | None = None,
    init: PolicyInit | None = None,
    parent: str | None = None,
    extra: dict[str, Any] | None = None,
) -> PolicyOutcome | None:
    """Train on the reward version's split (default: production); None on DDP ranks other than 0.

    ``init``: start from these weights and anchors (a warm start from ``parent``, the policy
    version recorded in the lineage); ``extra``: added to the lineage's ``extra``."""
    from parpo_core.artefacts import Lineage, Registry, SplitRef
    from parpo_core.runs import resolve_run_dir
    from parpo_core.trackers import log_published

    run = resolve_run_dir(KIND, run_dir)  # a rank the DDP launcher started gets rank 0's folder
    source = EnvSource.load(data_dir, registry, reward_version, cfg.env)
    trainer = _trainer_class(cfg)(cfg, source, run, preference_transform=preference_transform, init=init)
    result = trainer.fit(resume)
    if not result.is_global_zero:
        return None
    policy_dir, cat_path, anchors_path = (
        run / "export" / POLICY_DIR,
        run / "export" / CATALOGUE,
        run / "export" / ANCHORS,
    )
    result.policy.save(policy_dir)
    source.catalogue.write(cat_path)
    save_anchors(result.anchors, anchors_path)
    reward_lineage = Registry(registry).open("reward", source.reward_version, verify=False).lineage
    split = reward_lineage.split
    summary = final_summary(result.history)
    lineage = Lineage(
        parent=parent,
        reward=source.reward_version,
        data_fingerprint=source.dataset.fingerprint,
        split=SplitRef(
            name=split.name, seed=split.seed, algorithm=split.algorithm, positives=split.positives
        ),
        seed=cfg.runtime.seed,
        extra={
            "source": source.dataset.source,
            "algo": cfg.advantage.estimator,
            "group_size": cfg.train.group_size,
            "backend": result.policy.kind,
        }
        | (extra or {}),
    )
    version = Registry(registry).publish(
        KIND,
        lineage=lineage,
        config=cfg,
        metadata={
            "backend": result.policy.kind,
            "preset": preset,
            "algo": cfg.advantage.estimator,
            "action_schema_version": ACTION_SCHEMA_VERSION,
            "reward_version": source.reward_version,
            "updates": len(result.history),
        },
        metrics={"training": summary},
        logs=result.logs,
        files={POLICY_DIR: policy_dir, CATALOGUE: cat_path, ANCHORS: anchors_path},
    )
    log_published(result.trackers, version.path, version.label)
    return PolicyOutcome(version, result, run, summary)
