"""``step_until_done`` drives training rollouts and evaluation alike; ``candidate_mask``."""

from __future__ import annotations

import numpy as np

from parpo.env.environment import BatchEnv
from parpo.env.episodes import step_until_done
from parpo.env.schema import Recommend, Search
from tests.parpo.env.test_environment import CFG, task
from tests.plugins.envs import HandReward, hand_catalogue


def test_each_episode_acts_until_it_ends_and_only_then() -> None:
    env = BatchEnv(hand_catalogue(), HandReward(), CFG)
    tasks = [task(task_id=f"t{i}") for i in range(3)]
    seen: list[int] = []

    def act(observations):
        seen.append(len(observations))
        # Episode 0 recommends at once; the others search first, then recommend.
        if len(seen) == 1:
            return [Recommend(items=["a2"]), *(Search(strategy="popularity", k=5) for _ in observations[1:])]
        return [Recommend(items=list(o.candidate_ids[:2])) for o in observations]

    steps = list(step_until_done(env, tasks, act))
    assert seen == [3, 2]
    assert [s.active.tolist() for s in steps] == [[0, 1, 2], [1, 2]]
    assert [s.ended.tolist() for s in steps] == [[True, False, False], [True, True]]
    assert steps[0].terminated[0] and not steps[0].terminated[1:].any()
    assert set(steps[0].rewards) == set(steps[1].rewards) and steps[1].rewards["preference"].shape == (3,)


def test_candidate_mask_marks_known_ids_and_ignores_unknown() -> None:
    c = hand_catalogue()
    assert c.candidate_mask(None) is None
    m = c.candidate_mask([c.item_ids[2], "not-an-item", c.item_ids[0]])
    assert m.dtype == bool and m.shape == (len(c),)
    assert np.flatnonzero(m).tolist() == [0, 2]
