"""The hand-made catalogue and reward models (rules checked by hand), and the environment of
the tiny world with its published reward model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import pytest
import torch

from parpo.env import Catalogue, EnvConfig, EnvSource, Request, Task
from parpo.env.schema import Constraints


@pytest.fixture(scope="session")
def source(tiny_synth, published_reward) -> EnvSource:
    return EnvSource.load(tiny_synth, published_reward, cfg=EnvConfig())


def hand_catalogue() -> Catalogue:
    """Six items. Rows (sorted by id): a0 a1 a2 b0 b1 b2."""
    return Catalogue(
        pl.DataFrame(
            {
                "item_id": ["a0", "a1", "a2", "b0", "b1", "b2"],
                "category": ["a", "a", "a", "b", "b", None],
                "attributes": [["red"], ["red", "big"], [], ["big"], ["red"], []],
                "price": [10.0, 30.0, 20.0, None, 5.0, 1.0],
                "popularity": [5, 9, 5, 7, 1, 0],
                "recency": [3.0, 1.0, 2.0, 4.0, 0.0, -1.0],
            }
        )
    )


class HandReward:
    """preference = mean of fixed per-item values over the slate; counts its calls."""

    VALUES = {"a0": 0.2, "a1": 0.4, "a2": 0.6, "b0": 0.8, "b1": 1.0, "b2": 0.0}

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[list[str]], Any]] = []

    def preference_reward(
        self, user_ids: Sequence[str], slates: Sequence[Sequence[str]], profiles: Any = None
    ) -> np.ndarray:
        self.calls.append((list(user_ids), [list(s) for s in slates], profiles))
        # an empty slate (every item unknown) is worth 0, as the RewardModel protocol says
        return np.array([np.mean([self.VALUES[i] for i in s]) if s else 0.0 for s in slates])

    def score(
        self, user_ids: Sequence[str], item_ids: Sequence[str], profiles: Any = None
    ) -> dict[str, np.ndarray]:
        interest = np.array([self.VALUES.get(i, 0.0) for i in item_ids])
        cold = np.array([i not in self.VALUES for i in item_ids], dtype=bool)
        return {"interest": interest, "conformity": np.zeros_like(interest), "cold_item": cold}

    def score_matrix(
        self, user_ids: Sequence[str], item_ids: Sequence[str], profiles: Any = None
    ) -> dict[str, np.ndarray]:
        one = self.score(list(user_ids[:1]) * len(item_ids), item_ids, profiles)
        rows = len(user_ids)
        return {
            "interest": np.tile(one["interest"], (rows, 1)),
            "conformity": np.tile(one["conformity"], (rows, 1)),
            "cold_item": one["cold_item"],
        }


class HandUsers(HandReward):
    """``HandReward`` plus fixed 3-d interest vectors per user (unknown users: zeros, cold)."""

    VECTORS = {"u1": [1.0, 0.0, 0.5], "u2": [0.0, 1.0, -0.5]}

    def user_vectors(
        self, user_ids: Sequence[str], profiles: Any = None
    ) -> tuple[dict[str, torch.Tensor], np.ndarray]:
        v = torch.tensor([self.VECTORS.get(u, [0.0, 0.0, 0.0]) for u in user_ids])
        return {"interest": v}, np.array([u not in self.VECTORS for u in user_ids])


def hand_tasks() -> list[Task]:
    return [
        Task("t1", "u1", Request(category="a"), target="a1"),
        Task("t2", "u2", Request(category="b", constraints=Constraints(price_max=6.0)), target="b1"),
        Task("t3", "u9", Request(), target="a0", cold=True),
    ]
