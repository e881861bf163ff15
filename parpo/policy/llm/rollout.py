"""G episodes per task, each episode one training sample: its whole token sequence (prompt, every
turn's generated tokens, every tool result), the generated-token mask and the engine's log-probs.
Rewards are per episode (the environment's components are episodic)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from parpo.env.environment import BatchEnv
from parpo.env.episodes import step_until_done
from parpo.env.observation import Observation
from parpo.env.tasks import Task
from parpo.policy.llm.conversation import Conversation
from parpo.policy.llm.policy import LLMPolicy


@dataclass
class Episodes:
    """E = len(tasks) * G episodes: ``convs`` [E]; ``rewards``: component -> [E] float32;
    ``group`` [E] int64 (task index); ``user`` [E] int64 anchor rows; ``infos`` [E] the env's
    final info of each episode."""

    convs: list[Conversation]
    rewards: dict[str, Tensor]
    group: Tensor
    user: Tensor
    infos: list[dict[str, Any]]


def run_episodes(policy: LLMPolicy, env: BatchEnv, tasks: Sequence[Task], *, greedy: bool = False,
                 generator: torch.Generator | None = None) -> tuple[list[Conversation], dict[str, np.ndarray],
                                                                    list[dict[str, Any]]]:  # fmt: skip
    """One episode per task to its end; each episode's conversation is carried by its index, so
    the tokens trained on are exactly the ones sampled. Returns conversations [E], summed reward
    components (name -> [E]) and final infos [E]."""
    n = len(tasks)
    convs: list[Conversation | None] = [None] * n
    active = np.arange(n)

    def act(observations: list[Observation]) -> list[Any]:
        fresh = [j for j, i in enumerate(active.tolist()) if convs[i] is None]
        started = dict(zip(fresh, policy.start([observations[j] for j in fresh]), strict=True))
        prior = [started.get(j) or policy.chat.observe(convs[i], o)  # type: ignore[arg-type]
                 for j, (i, o) in enumerate(zip(active.tolist(), observations, strict=True))]  # fmt: skip
        done = policy.turn(prior, greedy=greedy, generator=generator)
        for i, c in zip(active.tolist(), done, strict=True):
            convs[i] = c
        return [policy.action(c, o) for c, o in zip(done, observations, strict=True)]

    rewards: dict[str, np.ndarray] = {}
    infos: list[dict[str, Any]] = [{} for _ in range(n)]
    for step in step_until_done(env, tasks, act):
        for k, v in step.rewards.items():
            rewards[k] = rewards.get(k, np.zeros(n)) + v
        for i in step.active[step.ended].tolist():
            infos[i] = step.infos[i]
        active = step.active[~step.ended]
    return [c for c in convs if c is not None], rewards, infos


def collect(policy: LLMPolicy, env: BatchEnv, tasks: Sequence[Task], group_size: int,
            user_index: dict[str, int], *, generator: torch.Generator | None = None) -> Episodes:  # fmt: skip
    """``group_size`` sampled episodes of every task (task-major)."""
    episodes = [t for t in tasks for _ in range(group_size)]
    convs, rewards, infos = run_episodes(policy, env, episodes, generator=generator)
    return Episodes(
        convs=convs,
        rewards={k: torch.from_numpy(v).float() for k, v in rewards.items()},
        group=torch.arange(len(tasks)).repeat_interleave(group_size),
        user=torch.tensor([user_index[t.user_id] for t in episodes], dtype=torch.int64),
        infos=infos,
    )
