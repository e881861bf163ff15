"""The ``Policy`` interface every backend implements (native transformer now, an LLM later).

A policy acts on a batch of environment observations and returns typed actions together with
the tokens that encode them, their per-token log-probabilities and a mask of the tokens the
policy actually chose (structural or non-policy tokens are 0). The optimiser only ever sees
``tokens``, ``logprobs`` and ``mask``; for an LLM backend tokens are text tokens and tool
outputs are masked, for the native backend they are the slots of ``parpo.policy.tokens``.

Temperature belongs to the policy's sampling distribution: ``logprobs`` scores tokens under
the same temperature ``act`` sampled them with, so PPO ratios start at exactly 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from torch import Tensor

from parpo.env.environment import BatchEnv
from parpo.env.observation import Observation
from parpo.env.schema import Filter, Recommend, Search
from parpo.env.tasks import Task
from parpo.policy.slates import SlateDraws, episode_slates


@dataclass
class ActOutput:
    """One step of a batch of episodes.

    ``actions``: [B] typed actions (the LLM backend hands a call that does not parse to the env as
    its text, which the env records as an invalid call); ``inputs``: the backend's encoded observations (whatever its
    ``logprobs`` needs to rescore the step later, as tensors with batch dim B); ``tokens`` [B, T]
    int64; ``logprobs`` [B, T] float32 (0 where ``mask`` is 0); ``mask`` [B, T] bool.
    """

    actions: list[Search | Filter | Recommend]
    inputs: dict[str, Tensor]
    tokens: Tensor
    logprobs: Tensor
    mask: Tensor


class Policy(Protocol):
    """What the trainer, the evaluator and the server need of a policy backend."""

    #: The backend's name in ``POLICY_BACKENDS`` (written to a version's metadata as ``backend``).
    kind: str
    temperature: float

    def act(
        self, observations: Sequence[Observation], *, greedy: bool = False, generator: Any = None
    ) -> ActOutput:
        """Sample (or, with ``greedy``, take the most likely) actions for a batch of observations."""
        ...

    def logprobs(self, inputs: dict[str, Tensor], tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Per-token log-probabilities [B, T] and entropies [B, T] of ``tokens`` under the current
        parameters (differentiable), for inputs recorded by ``act``."""
        ...

    def sample_slates(
        self, env: BatchEnv, tasks: Sequence[Task], n: int, *, generator: Any = None
    ) -> list[SlateDraws]:
        """``n`` independent sampled episodes of each task (``parpo.policy.slates``), as slates.
        The default runs them one by one; a backend that can share work between them overrides it
        (the native one: ``parpo.policy.plan_tree``)."""
        return episode_slates(self, env, tasks, n, generator=generator)

    def shown_skills(self, tasks: Sequence[Task]) -> list[list[dict[str, Any]]] | None:
        """Per task, the skills its observation shows from the policy's memory, named
        (``PolicyMemory.named``: id, scenario, plan, reason); None for a policy without memory."""
        ...

    def save(self, directory: str | Path) -> None: ...
