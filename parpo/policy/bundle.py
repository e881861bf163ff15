"""A published policy version with what it needs to act without the dataset.

A ``policy`` version holds ``policy/`` (weights + shapes, ``parpo.policy.native``), the
``catalogue.parquet`` snapshot (items, categories, attributes, prices, train popularity and
recency) and ``anchors.parquet``; its lineage's ``reward`` is the reward version whose user
vectors it reads and whose preference reward it was trained on.

    bundle = PolicyBundle.load("REG")            # production policy + its reward model
    out = bundle.policy.act(observations, greedy=True)
    per_task, env = bundle.rollout(bundle.agent(1.0, seed=0), [bundle.task("r1", "u1", Request())])

``task``/``agent``/``rollout`` answer requests that are not held-out tasks (serving, and the
logged requests of off-policy evaluation), the same way in both.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from parpo.artefact_kind import KIND
from parpo.env.catalogue import Catalogue
from parpo.env.config import EnvConfig
from parpo.env.environment import BatchEnv
from parpo.env.evaluate import run_episodes
from parpo.env.reward_model import RewardModel
from parpo.env.schema import Request
from parpo.env.tasks import Task
from parpo.policy.agent import PolicyAgent
from parpo.policy.backends import policy_class
from parpo.policy.base import Policy
from parpo.policy.slates import SlateDraws

CATALOGUE = "catalogue.parquet"
ANCHORS = "anchors.parquet"
POLICY_DIR = "policy"


class _NoReward:
    """Answering a request reads slates, never rewards: the preference reward (~10% of a call) is skipped."""

    def preference_reward(
        self, user_ids: Sequence[str], slates: Sequence[Sequence[str]], profiles: Any = None
    ) -> np.ndarray:
        return np.zeros(len(user_ids))


@dataclass
class PolicyBundle:
    policy: Policy
    reward_model: RewardModel
    catalogue: Catalogue
    version: Any  # parpo_core.artefacts.Version
    reward_version: str
    env: EnvConfig  # the environment rules the policy was trained under (its config's ``env``)

    @classmethod
    def load(cls, registry: str | Path, version: str | None = None) -> PolicyBundle:
        """Open ``version`` (default: production) of kind ``policy`` and its reward version."""
        from parpo_core.artefacts import Registry
        from parpo_core.artefacts.errors import RegistryError
        from reward_models.readout import KIND as REWARD
        from reward_models.readout import RewardModel

        reg = Registry(registry)
        v = reg.open(KIND, version)
        if not v.lineage.reward:
            raise RegistryError(f"policy version {v.name} names no reward version in its lineage")
        rv = reg.open(REWARD, v.lineage.reward)
        rm = RewardModel.load(rv.path, verify=False)  # just verified by open()
        catalogue = Catalogue.read(v.file(CATALOGUE))
        policy = policy_class(v.metadata).load(v.path / POLICY_DIR, rm, catalogue)
        env = EnvConfig.model_validate((v.config or {}).get("env", {}))
        return cls(policy, rm, catalogue, v, rv.name, env)

    def task(
        self,
        request_id: str,
        user_id: str,
        request: Request,
        *,
        candidates: Sequence[str] | None = None,
        k: int | None = None,
    ) -> Task:
        """An episode for a live or logged request: no held-out target; a user the reward model
        has never seen is cold."""
        return Task(
            task_id=request_id,
            user_id=user_id,
            request=request,
            target="",
            cold=user_id not in self.reward_model.user_index,
            candidates=tuple(candidates) if candidates is not None else None,
            k=k,
        )

    def agent(self, temperature: float, seed: int = 0) -> PolicyAgent:
        """Greedy at ``temperature`` <= 0, else sampling at ``temperature`` from a generator seeded
        with ``seed``; the network is shared, only the temperature differs."""
        if temperature <= 0:
            return PolicyAgent(self.policy, greedy=True)
        policy = copy.copy(self.policy)
        policy.temperature = temperature
        return PolicyAgent(policy, greedy=False, seed=seed)

    def rollout(self, agent: PolicyAgent, tasks: Sequence[Task]) -> tuple[pl.DataFrame, BatchEnv]:
        """One episode per task in one batch: ``run_episodes``' rows (plan, slate, task rewards;
        ``preference`` is 0, not computed) and the env, whose ``episodes`` hold each plan's calls."""
        env = BatchEnv(self.catalogue, _NoReward(), self.env)
        return run_episodes(env, agent, tasks, batch_size=max(len(tasks), 1)), env

    def sample_slates(self, agent: PolicyAgent, tasks: Sequence[Task], n: int) -> list[SlateDraws]:
        """``n`` sampled episodes of each task with ``agent``'s policy and generator, as slates
        (``Policy.sample_slates``: draw 0 is the one to serve). A greedy agent has nothing to sample."""
        if agent.greedy:
            raise ValueError(
                "sample_slates needs a sampling agent (temperature > 0); greedy answers are one rollout"
            )
        env = BatchEnv(self.catalogue, _NoReward(), self.env)
        return agent.policy.sample_slates(env, tasks, n, generator=agent.generator)
