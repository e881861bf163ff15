"""What ``parpo`` and ``serving`` use of a reward model: two Protocols, no import of
``reward_models`` (``reward_models.readout.RewardModel`` implements both).

The environment needs only the preference reward of a slate (``PreferenceModel``: serving
passes a stub that returns zeros); the policy's featurizer, the reference agents and the
server read vectors and scores too (``RewardModel``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch


class PreferenceModel(Protocol):
    def preference_reward(
        self, user_ids: Sequence[str], slates: Sequence[Sequence[str]], profiles: Any = None
    ) -> np.ndarray:
        """Preference reward in [0, 1] of each user's slate: [B] float64 (empty slate: 0)."""
        ...


class RewardModel(PreferenceModel, Protocol):
    #: user id -> dense index; a user not in it is cold (scored through the profile maps).
    user_index: Mapping[str, int]

    def user_vectors(
        self, user_ids: Sequence[str], profiles: Any = None
    ) -> tuple[dict[str, torch.Tensor], np.ndarray]:
        """Branch -> [B, d] user vectors, and cold flags [B] bool."""
        ...

    def score(
        self, user_ids: Sequence[str], item_ids: Sequence[str], profiles: Any = None
    ) -> dict[str, np.ndarray]:
        """[N] ``interest``, ``conformity``, ``click`` and ``cold``/``cold_user``/``cold_item`` flags
        of the pairs (user_ids[k], item_ids[k])."""
        ...

    def score_matrix(
        self, user_ids: Sequence[str], item_ids: Sequence[str], profiles: Any = None
    ) -> dict[str, np.ndarray]:
        """Every user against every item: [U, I] ``interest`` and ``conformity``, [I] ``cold_item``
        (what ``score`` gives for the U x I pairs, without gathering a vector per pair)."""
        ...
