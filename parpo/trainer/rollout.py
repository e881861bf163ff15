"""Rollouts: G episodes per task, stepped together, recorded as step samples for PPO.

Each step of each episode is one *sample*: the policy's encoded observation, its tokens,
their log-probabilities at sampling and the policy-token mask. Rewards are per *episode*
(the environment's components summed over the episode's steps; they are episodic, so this is
the final step's value); the trainer broadcasts an episode's advantage to all its samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from parpo.algorithms import ShapingConfig, shaping_rewards
from parpo.env.environment import BatchEnv
from parpo.env.episodes import step_until_done
from parpo.env.tasks import Task
from parpo.policy.base import ActOutput, Policy


@dataclass
class Rollouts:
    """S step samples of E = len(tasks) * G episodes.

    ``inputs``: encoded observations, each [S, ...]; ``tokens``/``old_logp``/``mask`` [S, T];
    ``episode`` [S] int64 the sample's episode; ``rewards``: component -> [E] float32;
    ``group`` [E] int64 (task index); ``user`` [E] int64 anchor rows; ``infos``: [E] the
    environment's final info of each episode (hit@10, ndcg@10, plan, slate, ...).
    """

    inputs: dict[str, Tensor]
    tokens: Tensor
    old_logp: Tensor
    mask: Tensor
    episode: Tensor
    rewards: dict[str, Tensor]
    group: Tensor
    user: Tensor
    infos: list[dict[str, Any]]

    @property
    def n_samples(self) -> int:
        return int(self.episode.numel())


def collect(
    policy: Policy,
    env: BatchEnv,
    tasks: Sequence[Task],
    group_size: int,
    user_index: dict[str, int],
    *,
    generator: torch.Generator | None = None,
) -> Rollouts:
    """Run ``group_size`` episodes of every task to the end (recommend or step limit)."""
    episodes = [t for t in tasks for _ in range(group_size)]
    n = len(episodes)
    rewards: dict[str, np.ndarray] = {}
    infos: list[dict[str, Any]] = [{} for _ in range(n)]
    parts: list[tuple[dict[str, Tensor], Tensor, Tensor, Tensor, Tensor]] = []
    outs: list[ActOutput] = []

    def act(observations: list[Any]) -> list[Any]:
        outs.append(policy.act(observations, generator=generator))
        return outs[-1].actions

    for step in step_until_done(env, episodes, act):
        for k, v in step.rewards.items():
            rewards[k] = rewards.get(k, np.zeros(n)) + v
        for i in step.active[step.ended].tolist():
            infos[i] = step.infos[i]
        out = outs[-1]
        parts.append((out.inputs, out.tokens, out.logprobs, out.mask, torch.from_numpy(step.active.copy())))
    inputs = {k: torch.cat([p[0][k] for p in parts]) for k in parts[0][0]}
    return Rollouts(
        inputs=inputs,
        tokens=torch.cat([p[1] for p in parts]),
        old_logp=torch.cat([p[2] for p in parts]),
        mask=torch.cat([p[3] for p in parts]),
        episode=torch.cat([p[4] for p in parts]).to(inputs["step"].device),
        rewards={k: torch.from_numpy(v).float() for k, v in rewards.items()},
        group=torch.arange(len(tasks)).repeat_interleave(group_size),
        user=torch.tensor([user_index[t.user_id] for t in episodes], dtype=torch.int64),
        infos=infos,
    )


def shaping_components(infos: Sequence[dict[str, Any]], cfg: ShapingConfig) -> dict[str, Tensor]:
    """The clipped shaping penalties ``[E]`` of each episode (``shaping_rewards``) from its final
    info (``steps``, ``invalid``), as reward components to add to ``Rollouts.rewards``."""
    length = torch.tensor([i.get("steps", 0) for i in infos], dtype=torch.float32)
    invalid = torch.tensor([len(i.get("invalid", ())) for i in infos], dtype=torch.float32)
    return shaping_rewards(length, invalid, cfg)
