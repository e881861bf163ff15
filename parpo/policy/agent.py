"""A policy behind the reference agents' interface, ``act(observations) -> actions`` (what
``parpo.env.evaluate.run_episodes`` drives): greedy by default, seeded when sampling."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from parpo.env.observation import Observation
from parpo.env.schema import Filter, Recommend, Search
from parpo.policy.base import Policy


class PolicyAgent:
    def __init__(self, policy: Policy, *, greedy: bool = True, seed: int = 0, name: str = "policy") -> None:
        self.policy, self.greedy, self.name = policy, greedy, name
        self.generator = torch.Generator(device=getattr(policy, "device", "cpu")).manual_seed(seed)

    def act(self, observations: Sequence[Observation]) -> list[Search | Filter | Recommend]:
        return self.policy.act(observations, greedy=self.greedy, generator=self.generator).actions
