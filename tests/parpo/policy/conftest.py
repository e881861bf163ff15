"""A hand-made catalogue and a fake reward model with fixed user vectors, for the policy's
token-level checks (no training, no dataset)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch

from parpo.env import BatchEnv, EnvConfig, Request, Task
from parpo.env.schema import Constraints
from parpo.policy.config import NativePolicyConfig
from parpo.policy.native import NativePolicy
from tests.parpo.env.conftest import HandReward, hand_catalogue


class HandUsers(HandReward):
    """``HandReward`` plus fixed 3-d interest vectors per user (unknown users: zeros, cold)."""

    VECTORS = {"u1": [1.0, 0.0, 0.5], "u2": [0.0, 1.0, -0.5]}

    def user_vectors(
        self, user_ids: Sequence[str], profiles: Any = None
    ) -> tuple[dict[str, torch.Tensor], np.ndarray]:
        v = torch.tensor([self.VECTORS.get(u, [0.0, 0.0, 0.0]) for u in user_ids])
        return {"interest": v}, np.array([u not in self.VECTORS for u in user_ids])


@pytest.fixture
def hand_env() -> BatchEnv:
    return BatchEnv(hand_catalogue(), HandUsers(), EnvConfig(k=3, max_steps=3, search_k=6))


@pytest.fixture
def hand_policy() -> NativePolicy:
    torch.manual_seed(0)
    cfg = NativePolicyConfig(dim=16, heads=2, layers=1, max_k=3, max_candidates=6)
    return NativePolicy.create(cfg, HandUsers(), hand_catalogue(), search_k=6)


def hand_tasks() -> list[Task]:
    return [
        Task("t1", "u1", Request(category="a"), target="a1"),
        Task("t2", "u2", Request(category="b", constraints=Constraints(price_max=6.0)), target="b1"),
        Task("t3", "u9", Request(), target="a0", cold=True),
    ]
