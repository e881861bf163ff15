"""Everything an environment reads, opened once: dataset, the reward version's split,
catalogue, reward model and (synthetic data) the ground truth.

    src = EnvSource.load("data/synth", "REG")          # production reward version
    env = src.env()                                     # a BatchEnv
    obs = env.reset(src.tasks("warm"))

The split is the one named in the reward version's lineage (name, seed, algorithm, positives
rule), so the reward model never saw an evaluation task.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_pipelines.dataset import Dataset
from data_pipelines.splits import PositivesRule, Split, load_split
from parpo.env.catalogue import Catalogue
from parpo.env.config import EnvConfig
from parpo.env.environment import BatchEnv, PreferenceTransform
from parpo.env.reward_model import RewardModel
from parpo.env.tasks import Task, make_tasks
from parpo_core.errors import DataError


@dataclass
class EnvSource:
    dataset: Dataset
    split: Split
    catalogue: Catalogue
    reward_model: RewardModel  # reward_models.readout.RewardModel (torch is imported only when loading)
    reward_version: str
    cfg: EnvConfig
    truth: Any = None  # data_pipelines.synth.Truth on synthetic data

    @classmethod
    def load(
        cls,
        data_dir: str | Path,
        registry: str | Path,
        version: str | None = None,
        cfg: EnvConfig | None = None,
    ) -> EnvSource:
        """``version``: a reward version name or number (default: production)."""
        from parpo_core.artefacts import Registry
        from reward_models.readout import KIND, RewardModel

        v = Registry(registry).open(KIND, version)
        ref = v.lineage.split
        rule = PositivesRule.model_validate(ref.positives) if ref.positives else PositivesRule()
        ds = Dataset(data_dir)
        if v.lineage.data_fingerprint != ds.fingerprint:
            raise DataError(
                f"{data_dir}: data fingerprint {ds.fingerprint[:12]} is not the one reward version "
                f"{v.name} was trained on ({v.lineage.data_fingerprint[:12]})"
            )
        split = load_split(ds, ref.name, ref.seed, rule, algorithm=ref.algorithm)
        return cls(
            dataset=ds,
            split=split,
            catalogue=Catalogue.build(ds.items(), split.train),
            reward_model=RewardModel.load(v.path, verify=False),  # just verified by open()
            reward_version=v.name,
            cfg=cfg or EnvConfig(),
            truth=_truth(ds),
        )

    def tasks(self, which: str, *, capped: bool = True) -> list[Task]:
        """Task set ``train``, ``warm`` (test part) or ``cold`` (cold_test), per ``cfg.tasks``;
        ``capped=False`` lifts ``max_eval`` (evaluation samples its own, ``parpo.evaluation.sample``)."""
        t = self.cfg.tasks
        if which == "train":
            return make_tasks(self.split, self.catalogue, which, t, per_user=t.per_user_train)
        return make_tasks(
            self.split,
            self.catalogue,
            which,
            t,
            per_user=t.per_user_eval,
            max_tasks=t.max_eval if capped else None,
        )

    def env(self, preference_transform: PreferenceTransform | None = None) -> BatchEnv:
        return BatchEnv(
            self.catalogue,
            self.reward_model,
            self.cfg,
            true_interest=None if self.truth is None else self.truth.interest,
            preference_transform=preference_transform,
        )


def _truth(ds: Dataset) -> Any:
    if not (ds.root / "truth" / "meta.json").is_file():
        return None
    from data_pipelines.synth import Truth

    return Truth(ds.root)
