"""A published policy version with what it needs to act without the dataset.

A ``policy`` version holds ``policy/`` (weights + shapes, ``parpo.policy.native``), the
``catalogue.parquet`` snapshot (items, categories, attributes, prices, train popularity and
recency) and ``anchors.parquet``; its lineage's ``reward`` is the reward version whose user
vectors it reads and whose preference reward it was trained on.

    bundle = PolicyBundle.load("REG")            # production policy + its reward model
    out = bundle.policy.act(observations, greedy=True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parpo.env.catalogue import Catalogue
from parpo.env.config import EnvConfig
from parpo.policy.native import NativePolicy

KIND = "policy"
CATALOGUE = "catalogue.parquet"
ANCHORS = "anchors.parquet"
POLICY_DIR = "policy"


@dataclass
class PolicyBundle:
    policy: NativePolicy
    reward_model: Any  # reward_models.readout.RewardModel
    catalogue: Catalogue
    version: Any  # reward_models.registry.Version
    reward_version: str
    env: EnvConfig  # the environment rules the policy was trained under (its config's ``env``)

    @classmethod
    def load(cls, registry: str | Path, version: str | None = None) -> PolicyBundle:
        """Open ``version`` (default: production) of kind ``policy`` and its reward version."""
        from reward_models.readout import KIND as REWARD
        from reward_models.readout import RewardModel
        from reward_models.registry import Registry
        from reward_models.registry.errors import RegistryError

        reg = Registry(registry)
        v = reg.open(KIND, version)
        if not v.lineage.reward:
            raise RegistryError(f"policy version {v.name} names no reward version in its lineage")
        rv = reg.open(REWARD, v.lineage.reward)
        rm = RewardModel.load(rv.path, verify=False)  # just verified by open()
        catalogue = Catalogue.read(v.file(CATALOGUE))
        policy = NativePolicy.load(v.path / POLICY_DIR, rm, catalogue)
        env = EnvConfig.model_validate((v.config or {}).get("env", {}))
        return cls(policy, rm, catalogue, v, rv.name, env)
