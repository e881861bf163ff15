import numpy as np
from sklearn.metrics import adjusted_rand_score

from parpo.memory.config import MemoryConfig
from parpo.memory.graph import SkillGraph

from .helpers import anchors, traj

GROUPS, USERS, SKILLS = 4, 12, 10  # per group


def planted(refresh_every: int) -> tuple[SkillGraph, np.ndarray]:
    """Users of group g use group g's skills with probability 0.5, others' with 0.02."""
    rng = np.random.default_rng(0)
    g = SkillGraph(MemoryConfig(refresh_every=refresh_every, seed=1))
    batch = []
    for u in range(GROUPS * USERS):
        for s in range(GROUPS * SKILLS):
            p = 0.5 if u // USERS == s // SKILLS else 0.02
            if rng.random() < p:
                batch.append(traj(f"{u}/{s}", u, f"skill{s}"))  # one scenario per skill: no merging
    g.write(batch, anchors=anchors(GROUPS * USERS))
    truth = np.array(
        [int(g.scenarios[int(g.skills.scenario[s])].category[5:]) // SKILLS for s in g.skills.live()]
    )
    return g, truth


def test_leiden_recovers_the_planted_groups():
    g, truth = planted(refresh_every=1)
    assert g.communities.refreshes == 1
    fine = g.communities.skill[1, g.skills.live()]
    assert adjusted_rand_score(truth, fine) == 1.0
    assert g.write([])["memory/communities_fine"] == GROUPS
    coarse = g.communities.skill[0, g.skills.live()]
    assert np.unique(coarse).size <= np.unique(fine).size


def test_new_skill_takes_its_users_community_until_the_next_run():
    g, truth = planted(refresh_every=1000)  # the first write passes MIN_CHANGES: one full run
    group0 = int(g.communities.skill[1, g.skills.live()[truth == 0][0]])
    g.write([traj("new", u, "fresh") for u in range(3)], anchors=anchors(GROUPS * USERS))  # users of group 0
    slot = g.sid_slot[g.skills.next_sid - 1]
    fine = g.communities.skill[1]
    assert g.communities.refreshes == 1 and int(fine[slot]) == group0
    # a skill nobody linked to the graph before gets a label of its own
    g.write([traj("lone", GROUPS * USERS + 5, "alone")], anchors=anchors(GROUPS * USERS + 6))
    lone = g.sid_slot[g.skills.next_sid - 1]
    assert int(g.communities.skill[1, lone]) not in set(fine[g.skills.live()[:-1]].tolist())
