"""The featurizer's user-vector cache: bounded (serving sees endless user ids), answers every
observation of a batch even past its limit, and never stores profiled (cold) users."""

from __future__ import annotations

import numpy as np

import parpo.policy.features as features
from parpo.env import EnvConfig, Request, Task
from parpo.env.environment import BatchEnv
from parpo.policy.features import Featurizer
from tests.plugins.envs import HandUsers, hand_catalogue


class CountingUsers(HandUsers):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[list[str]] = []

    def user_vectors(self, user_ids, profiles=None):
        self.asked.append(list(user_ids))
        return super().user_vectors(user_ids, profiles)


def _obs(users: list[tuple[str, tuple[str, ...] | None]]):
    env = BatchEnv(hand_catalogue(), HandUsers(), EnvConfig(k=3, max_steps=3, search_k=6))
    return env.reset([Task(f"t{i}", u, Request(), target="a0", profile=p) for i, (u, p) in enumerate(users)])


def test_user_cache_is_bounded_and_keeps_what_the_batch_needs(monkeypatch):
    monkeypatch.setattr(features, "USER_CACHE_LIMIT", 2)
    rm = CountingUsers()
    f = Featurizer(rm, hand_catalogue(), max_candidates=6, max_k=3)
    rm.asked.clear()  # the constructor's probe
    first = f.users(_obs([("u1", None), ("u2", None), ("u1", None)]))
    np.testing.assert_array_equal(first, [[1.0, 0.0, 0.5], [0.0, 1.0, -0.5], [1.0, 0.0, 0.5]])
    # u1 is cached, x and y are new (3 keys for a cache of 2) and the profiled u9 is never stored.
    batch = [("u1", None), ("x", None), ("y", None), ("u9", ("a0",))]
    second = f.users(_obs(batch))
    np.testing.assert_array_equal(
        second, [[1.0, 0.0, 0.5], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    )
    assert rm.asked == [["u1", "u2"], ["x", "y", "u9"]]
    assert len(f._users) == 2 and ("u9", ("a0",)) not in f._users
    f.users(_obs([("u9", ("a0",))]))
    assert rm.asked[-1] == ["u9"]  # a profiled user is asked again every time
