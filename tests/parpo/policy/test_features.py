"""The featurizer's user-vector cache: bounded (serving sees endless user ids), answers every
observation of a batch even past its limit, and never stores profiled (cold) users."""

from __future__ import annotations

import numpy as np

import parpo.env.personal as personal
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


def test_personal_table_by_hand():
    # Scored interest [3, 1, 5] (item 2 unscored): ranks 1, 0, 2 of 3 -> 0.5, 0, 1;
    # mean 3, population std sqrt(8/3); constant conformity standardises to 0.
    t = personal.personal_table(
        np.array([3.0, 1.0, 7.0, 5.0]), np.array([2.0, 2.0, 9.0, 2.0]), np.array([True, True, False, True])
    )
    z = 2.0 / np.sqrt(8.0 / 3.0)
    expected = [[0.5, 0.0, 0.0, 1.0], [0.0, -z, 0.0, 1.0], [0.5, 0.0, 0.0, 0.0], [1.0, z, 0.0, 1.0]]
    np.testing.assert_allclose(t, expected, rtol=1e-6)
    assert t.dtype == np.float32


def test_personal_features_follow_the_candidates_and_the_switch():
    env = BatchEnv(hand_catalogue(), HandUsers(), EnvConfig(k=3, max_steps=3, search_k=6))
    env.reset([Task("t", "u1", Request(), target="a0")])
    (obs,), *_ = env.step([{"tool": "search", "strategy": "popularity", "k": 6}])
    on = Featurizer(HandUsers(), hand_catalogue(), 6, 3, personal=True).encode([obs])["cand_feats"]
    off = Featurizer(HandUsers(), hand_catalogue(), 6, 3).encode([obs])["cand_feats"]
    n = len(features.FEATURES)
    assert off.shape == (1, 6, n) and on.shape == (1, 6, n + 4)
    np.testing.assert_array_equal(on[..., :n].numpy(), off.numpy())
    # HandReward interest a0..b2 = .2 .4 .6 .8 1 0: percentile = rank among the six / 5.
    pct = {"b2": 0.0, "a0": 0.2, "a1": 0.4, "a2": 0.6, "b0": 0.8, "b1": 1.0}
    got = on[0, :, n].tolist()
    np.testing.assert_allclose(got, [pct[i] for i in obs.candidate_ids], rtol=1e-6)
    assert on[0, :, n + 3].tolist() == [1.0] * 6


def test_personal_tables_in_bounded_calls_are_the_same(monkeypatch):
    """A batch of users x a large catalogue is scored in several calls, with the same tables."""
    env = BatchEnv(hand_catalogue(), HandUsers(), EnvConfig(k=3, max_steps=3, search_k=6))
    obs = env.reset([Task(f"t{u}", u, Request(), target="a0") for u in ("u1", "u2", "u9")])
    one = Featurizer(HandUsers(), hand_catalogue(), 6, 3, personal=True).personal_tables(obs)
    monkeypatch.setattr(personal, "PERSONAL_MAX_PAIRS", 6)  # one user (six items) per call
    rm = CountingUsers()
    calls = []
    rm.score_matrix = lambda u, i, p=None: calls.append(len(u)) or HandUsers.score_matrix(rm, u, i, p)
    split = Featurizer(rm, hand_catalogue(), 6, 3, personal=True).personal_tables(obs)
    assert calls == [1, 1, 1]  # one user per call
    for a, b in zip(one, split, strict=True):
        np.testing.assert_array_equal(a, b)
