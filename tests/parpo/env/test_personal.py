"""The reward model's per-user tables and the ``personal`` search strategy that ranks by them."""

from __future__ import annotations

import numpy as np

from parpo.env import EnvConfig, Request, Task
from parpo.env.environment import BatchEnv
from parpo.env.personal import PersonalTables, personal_table
from parpo.env.schema import Search
from tests.plugins.envs import HandReward, hand_catalogue


def test_personal_table_by_hand():
    # Scored interest [3, 1, 5] (item 2 unscored): ranks 1, 0, 2 of 3 -> 0.5, 0, 1;
    # mean 3, population std sqrt(8/3); constant conformity standardises to 0.
    t = personal_table(
        np.array([3.0, 1.0, 7.0, 5.0]), np.array([2.0, 2.0, 9.0, 2.0]), np.array([True, True, False, True])
    )
    z = 2.0 / np.sqrt(8.0 / 3.0)
    expected = [[0.5, 0.0, 0.0, 1.0], [0.0, -z, 0.0, 1.0], [0.5, 0.0, 0.0, 0.0], [1.0, z, 0.0, 1.0]]
    np.testing.assert_allclose(t, expected, rtol=1e-6)
    assert t.dtype == np.float32


def test_personal_search_ranks_by_the_users_interest_and_needs_the_tables():
    """Hand values (interest a0 .2, a1 .4, a2 .6, b0 .8, b1 1, b2 0): percentiles over the six
    items rank category a as a2, a1, a0, where popularity (a1 9, a0 5, a2 5) gives a1, a0, a2."""
    cat, rm = hand_catalogue(), HandReward()
    tables = PersonalTables(rm, cat)
    env = BatchEnv(cat, rm, EnvConfig(k=3, max_steps=3, search_k=6), personal=tables)
    env.reset(
        [Task("t1", "u1", Request(category="a"), target="a0"), Task("t2", "u2", Request(), target="b0")]
    )
    obs, *_ = env.step([Search(category="a", strategy="personal", k=3), Search(strategy="personal", k=2)])
    assert [o.candidate_ids for o in obs] == [["a2", "a1", "a0"], ["b1", "b0"]]
    obs, *_ = env.step([Search(category="a", strategy="popularity", k=3), Search(k=2)])
    assert obs[0].candidate_ids == ["a1", "a0", "a2"]
    assert len(rm.calls) == 0 and len(tables._cache) == 2  # one table per user, no reward call

    plain = BatchEnv(cat, rm, EnvConfig(k=3, max_steps=3, search_k=6))  # no tables: not offered
    plain.reset([Task("t1", "u1", Request(category="a"), target="a0")])
    (o,), *_ = plain.step([Search(category="a", strategy="personal", k=3)])
    assert (
        o.candidate_ids == [] and o.history[-1].error == "the personal strategy needs a reward model's scores"
    )
