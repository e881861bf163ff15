"""A tiny synthetic dataset with a quickly trained, published reward model, and a hand-made
catalogue with a hand-made reward model for rules checked by hand."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from parpo.env import Catalogue, EnvConfig, EnvSource
from tests.reward_models.conftest import reward_config, tiny_synth  # noqa: F401  (shared fixture)


@pytest.fixture(scope="session")
def published_reward(tiny_synth, tmp_path_factory) -> Path:  # noqa: F811
    """REG holding one DICE version trained for 3 epochs on ``tiny_synth`` (production)."""
    from reward_models.pipeline import train_and_publish

    root = tmp_path_factory.mktemp("env-reg")
    assert train_and_publish(reward_config(), tiny_synth, root / "REG", root / "run", label="dice")
    return root / "REG"


@pytest.fixture(scope="session")
def source(tiny_synth, published_reward) -> EnvSource:  # noqa: F811
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
        return np.array([np.mean([self.VALUES[i] for i in s]) for s in slates])

    def score(
        self, user_ids: Sequence[str], item_ids: Sequence[str], profiles: Any = None
    ) -> dict[str, np.ndarray]:
        return {"interest": np.array([self.VALUES[i] for i in item_ids])}
