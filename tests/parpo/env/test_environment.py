"""Environment rules with hand-checked components (hand catalogue, hand reward model).

Request of every task: category "a", price_max 25 -> feasible items a0 (10) and a2 (20); target
a2; K = 3, max_steps = 4; task_quality weights 0.5 / 0.2 / 0.2 / 0.1.
"""

from __future__ import annotations

import json

import pytest

from parpo.env import BatchEnv, Constraints, EnvConfig, Environment, Filter, Recommend, Request, Search, Task
from parpo.env.catalogue import FEATURES
from parpo.env.observation import PERSONAL_KEYS
from parpo.env.personal import PersonalTables
from parpo.env.schema import action_to_json
from tests.plugins.envs import HandReward, HandUsers, hand_catalogue

CFG = EnvConfig(k=3, max_steps=4)
REQ = Request(category="a", constraints=Constraints(price_max=25))
SEARCH = Search(category="a", constraints=REQ.constraints, k=10)


def task(**kw) -> Task:
    return Task(**({"task_id": "t", "user_id": "u", "request": REQ, "target": "a2"} | kw))


def env(**kw) -> Environment:
    return Environment(hand_catalogue(), HandReward(), CFG, **kw)


def test_valid_plan_scores_one():
    e = env()
    obs = e.reset(task())
    assert obs.step == 0 and obs.candidates.size == 0
    obs, r, term, trunc, _ = e.step(SEARCH)
    assert obs.candidate_ids == ["a0", "a2"] and r["preference"] == 0.0 and not term and not trunc
    obs, r, term, trunc, info = e.step(Recommend(items=["a2", "a0"]))
    assert term and not trunc
    assert r == {
        "task/constraints": 1.0,
        "task/items_valid": 1.0,
        "task/valid_calls": 1.0,
        "task/efficiency": 1.0,
        "preference": pytest.approx(0.4),
    }
    assert info["hit@10"] == 1.0 and info["ndcg@10"] == 1.0 and info["task_quality"] == pytest.approx(1.0)
    assert info["plan"] == "search:popularity+c>recommend" and info["ungrounded"] == 0


def test_invalid_calls_unknown_and_duplicate_items():
    e = env()
    e.reset(task())
    _, r, term, trunc, _ = e.step(Filter(constraints=Constraints(price_max=5)))  # before any search
    assert not term and not trunc and sum(r.values()) == 0
    e.step({"tool": "search", "category": "zzz"})  # unknown category
    _, r, term, trunc, info = e.step(Recommend(items=["a1", "a1", "nope", "a0"]))
    assert term and not trunc
    assert info["slate"] == ["a1", "a0"] and (info["unknown"], info["duplicate"], info["entries"]) == (
        1,
        1,
        4,
    )
    assert r["task/constraints"] == 0.5  # a0 meets the request, a1 (30) is over the cap; 1 / max(2, 2)
    assert r["task/items_valid"] == 0.5  # 2 of 4 entries
    assert r["task/valid_calls"] == pytest.approx(1 / 3)  # filter and search invalid
    assert r["task/efficiency"] == 0.5  # 3 calls: (4 - 3) / (4 - 2)
    assert r["preference"] == pytest.approx(0.3)
    assert info["hit@10"] == 0.0 and info["ndcg@10"] == 0.0
    assert info["task_quality"] == pytest.approx(0.5 * 0.5 + 0.2 * 0.5 + 0.2 / 3 + 0.1 * 0.5)
    assert len(info["invalid"]) == 3 and "filter before any search" in info["invalid"][0]
    assert info["ungrounded"] == 2 and info["plan"] == "invalid>invalid>recommend"


def test_step_limit_truncates_and_scores_zero_without_a_slate():
    e = env()
    e.reset(task())
    for step in range(1, 5):
        _, r, term, trunc, info = e.step(SEARCH)
        assert not term and trunc == (step == 4)
    assert r == {
        "task/constraints": 0.0,
        "task/items_valid": 0.0,
        "task/valid_calls": 1.0,
        "task/efficiency": 0.0,
        "preference": 0.0,
    }
    assert info["slate"] == [] and info["hit@10"] == 0.0 and info["task_quality"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="has ended"):
        e.step(SEARCH)


def test_unparsable_action_is_recorded_not_raised():
    e = env()
    e.reset(task())
    _, r, term, trunc, _ = e.step('{"tool": "search", "k": 0}')
    assert not term and not trunc
    _, r, term, _, info = e.step(Recommend(items=["b2"]))
    assert term and "search.k" in info["invalid"][0]
    assert r["task/valid_calls"] == 0.5 and r["task/constraints"] == 0.0 and r["task/efficiency"] == 1.0
    assert r["preference"] == 0.0


def test_slate_is_cut_at_k_and_candidates_restrict_search():
    e = env()
    e.reset(task())
    _, r, _, _, info = e.step(Recommend(items=["a0", "a1", "a2", "b0", "b1"]))
    assert info["slate"] == ["a0", "a1", "a2"] and info["overflow"] == 2
    assert r["task/constraints"] == pytest.approx(2 / 3) and r["task/efficiency"] == 1.0
    obs = e.reset(task(candidates=("a0", "b1")))
    obs, *_ = e.step(Search(k=10))
    assert obs.candidate_ids == ["a0", "b1"]
    _, r, _, _, info = e.step(Recommend(items=["a1", "a0"]))  # a1 is not among the task's candidates
    assert info["unknown"] == 1 and r["task/constraints"] == 1.0  # 1 feasible allowed item, shown


def test_filter_narrows_the_candidates():
    e = env()
    e.reset(task())
    e.step(Search(category="a", k=10))
    obs, *_ = e.step(Filter(constraints=Constraints(attributes=["red"])))
    assert obs.candidate_ids == ["a1", "a0"]


def test_branched_episodes_step_on_their_own():
    """``branch`` forks one episode into copies that take different calls (the plan tree)."""
    b = BatchEnv(hand_catalogue(), HandReward(), CFG)
    b.reset([task()])
    b.step([Search(category="a", k=10)])
    assert [o.candidate_ids for o in b.branch([0, 0])] == [["a1", "a0", "a2"]] * 2
    obs, _, term, _, info = b.step([Filter(constraints=REQ.constraints), Recommend(items=["a2"])])
    assert obs[0].candidate_ids == ["a0", "a2"] and not term[0]
    assert term[1] and info[1]["plan"] == "search:popularity>recommend" and info[1]["slate"] == ["a2"]
    # The first copy's history has its own filter; the second's never saw it.
    assert [c.signature for c in b.episodes[0].history] == ["search:popularity", "filter"]
    assert [c.signature for c in b.episodes[1].history] == ["search:popularity", "recommend"]
    assert [o.step for o in b.branch([1, 0])] == [2, 2]


def test_batch_calls_the_reward_model_once_per_user_and_slate_and_transforms():
    rm = HandReward()
    b = BatchEnv(hand_catalogue(), rm, CFG, preference_transform=lambda users, r: r * 10)
    tasks = [
        task(task_id=str(i), user_id="u" if i < 2 else "v", profile=("b1",) if i == 2 else None)
        for i in range(3)
    ]
    b.reset(tasks)
    rec = Recommend(items=["a2", "a0"])
    _, r, term, _, infos = b.step([rec, rec, rec])
    assert term.all()
    assert r["preference"].tolist() == pytest.approx([4.0, 4.0, 4.0])
    assert infos[0]["preference_raw"] == pytest.approx(0.4)
    assert rm.calls == [(["u", "v"], [["a2", "a0"], ["a2", "a0"]], [None, ["b1"]])]
    b.reset(tasks)
    b.step([rec, rec, rec])
    assert len(rm.calls) == 1  # cached
    with pytest.raises(ValueError, match="needs an action"):
        b.reset(tasks[:1])
        b.step([None])


def test_a_full_preference_cache_keeps_what_the_call_needs(monkeypatch):
    """Issue 24: with the cache full, a batch mixing a cached slate and new ones used to empty the
    cache after the cached key had been left out of the work list (KeyError)."""
    import parpo.env.environment as environment

    monkeypatch.setattr(environment, "CACHE_LIMIT", 2)
    rm = HandReward()
    b = BatchEnv(hand_catalogue(), rm, CFG)
    slates = [["a2", "a0"], ["b0"], ["b1", "a1"]]  # preference 0.4, 0.8, 0.7 (mean of item values)
    b.reset([task(task_id="0")])
    b.step([Recommend(items=slates[0])])
    b.reset([task(task_id=str(i)) for i in range(3)])
    _, r, *_ = b.step([Recommend(items=s) for s in slates])
    assert r["preference"].tolist() == pytest.approx([0.4, 0.8, 0.7])
    assert rm.calls[1][1] == slates[1:]  # the cached slate is not scored again
    assert len(b._pref_cache) == 2  # bounded: the least recently used entry went
    b.reset([task(task_id=str(i)) for i in range(3)])
    _, r, *_ = b.step([Recommend(items=s) for s in slates])
    assert r["preference"].tolist() == pytest.approx([0.4, 0.8, 0.7])
    assert rm.calls[2][1] == [slates[0]]  # only the evicted one is scored again


def test_batch_equals_one_at_a_time():
    plans = [
        [SEARCH, Recommend(items=["a0"])],
        [
            Search(strategy="price_desc", k=2),
            Filter(constraints=Constraints(price_max=25)),
            Recommend(items=["a2"]),
        ],
        [Search(), Search(), Search(), Search()],
    ]
    single = []
    for p in plans:
        e = env()
        e.reset(task())
        for a in p:
            _, r, term, trunc, info = e.step(a)
        single.append((r, info["task_quality"]))
    b = BatchEnv(hand_catalogue(), HandReward(), CFG)
    b.reset([task(task_id=str(i)) for i in range(3)])
    done: dict[int, tuple] = {}
    for s in range(4):
        acts = [p[s] if s < len(p) else None for p in plans]
        _, r, term, trunc, infos = b.step(acts)
        for i in range(3):
            if term[i] or trunc[i]:
                done[i] = ({k: float(v[i]) for k, v in r.items()}, infos[i]["task_quality"])
    assert [done[i] for i in range(3)] == single


def test_observation_renders_as_json_without_the_target():
    e = env()
    e.reset(task(target="b1"))
    obs, *_ = e.step(SEARCH)
    data = json.loads(json.dumps(obs.to_json()))
    assert [c["item_id"] for c in data["candidates"]] == ["a0", "a2"]
    assert data["candidates"][0] == {
        "item_id": "a0",
        "category": "a",
        "price": 10.0,
        "popularity": 5,
        "attributes": ["red"],
    }
    assert data["history"] == [{"action": action_to_json(SEARCH), "valid": True, "error": None}]
    assert "b1" not in json.dumps(data)
    assert obs.features.shape == (2, len(FEATURES))


class WithoutA2(HandUsers):
    """The hand reward model with no vector for item a2 (it cannot score it)."""

    VALUES = {k: v for k, v in HandUsers.VALUES.items() if k != "a2"}


def test_to_json_carries_the_personal_table_when_given():
    e = env()
    e.reset(task(target="b1"))
    obs, *_ = e.step(SEARCH)  # a0, a2
    (table,) = PersonalTables(WithoutA2(), hand_catalogue()).lookup([("u1", None)])
    data = json.loads(json.dumps(obs.to_json(table)))
    # Scored interest b2 0, a0 .2, a1 .4, b0 .8, b1 1 (five items): a0 ranks 1 of 0..4 -> 0.25;
    # mean .48, population std sqrt(.1376) = .37094: a0 z = -.28 / .37094 = -.755 -> -0.75;
    # constant conformity standardises to 0; a2 is unscored: the neutral values, scored false.
    assert data["candidates"][0] == {
        "item_id": "a0", "category": "a", "price": 10.0, "popularity": 5, "attributes": ["red"],
        "interest_pct": 0.25, "interest_z": -0.75, "conformity_z": 0.0, "scored": True,
    }  # fmt: skip
    assert {k: data["candidates"][1][k] for k in PERSONAL_KEYS} == {
        "interest_pct": 0.5, "interest_z": 0.0, "conformity_z": 0.0, "scored": False,
    }  # fmt: skip
    assert obs.to_json()["candidates"][0].keys().isdisjoint(PERSONAL_KEYS)  # off: catalogue fields only
