"""The hand-made environment and a small untrained policy for the policy's token-level checks
(no training, no dataset)."""

from __future__ import annotations

import pytest
import torch

from parpo.env import BatchEnv, EnvConfig
from parpo.policy.config import NativePolicyConfig
from parpo.policy.native import NativePolicy
from tests.plugins.envs import HandUsers, hand_catalogue


@pytest.fixture
def hand_env() -> BatchEnv:
    return BatchEnv(hand_catalogue(), HandUsers(), EnvConfig(k=3, max_steps=3, search_k=6))


@pytest.fixture
def hand_policy() -> NativePolicy:
    torch.manual_seed(0)
    cfg = NativePolicyConfig(dim=16, heads=2, layers=1, max_k=3, max_candidates=6)
    return NativePolicy.create(cfg, HandUsers(), hand_catalogue(), search_k=6)
