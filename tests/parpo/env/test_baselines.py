"""The four baselines end to end on the tiny synthetic dataset with a trained reward model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from parpo.env.baselines import PLANS, GreedyRewardAgent, oracle_true_agent, popularity_agent
from parpo.env.evaluate import METRICS, baseline_agents, run_episodes, select_fixed_plan, summarise

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def results(source):
    env = source.env()
    agents = baseline_agents(env, source.tasks("train"))
    return {(a.name, w): run_episodes(env, a, source.tasks(w)) for a in agents for w in ("warm", "cold")}


def test_every_metric_is_a_number_for_every_agent(results, source):
    assert {n for n, _ in results} == {"random", "popularity", "fixed_plan", "greedy_reward"}
    for (name, which), df in results.items():
        s = summarise(df)
        assert s["n_tasks"] == len(source.tasks(which)) == df.height
        assert set(METRICS) <= set(s)  # synthetic data: true_preference too
        assert all(isinstance(v, float) and math.isfinite(v) for k, v in s.items() if k != "n_tasks"), name
        assert 0.0 <= s["task_quality"] <= 1.0 and 0.0 <= s["preference"] <= 1.0
        assert df["terminated"].all() and not df["truncated"].any()


def test_popularity_agent_recommends_the_most_popular_feasible_items(results, source):
    c = source.catalogue
    df = results[("popularity", "warm")]
    for t, slate in zip(source.tasks("warm"), df["slate"].to_list(), strict=True):
        pool = np.flatnonzero(c.mask(t.request.category, t.request.constraints))
        best = pool[np.lexsort((pool, -c.popularity[pool]))][:10]
        assert slate == [c.item_ids[r] for r in best]
    assert set(df["plan"]) == {"search:popularity+c>recommend"}


def test_greedy_agent_ranks_the_feasible_items_by_interest(results, source):
    rm, c = source.reward_model, source.catalogue
    t = source.tasks("cold")[0]
    slate = results[("greedy_reward", "cold")]["slate"][0].to_list()
    pool = [c.item_ids[r] for r in np.flatnonzero(c.mask(t.request.category, t.request.constraints))]
    s = rm.score([t.user_id] * len(pool), pool, {t.user_id: list(t.profile)})["interest"]
    assert slate == [pool[j] for j in np.argsort(-s, kind="stable")[:10]]
    assert GreedyRewardAgent(rm).oracle


def test_fixed_plan_is_the_best_on_training_tasks(source):
    env = source.env()
    agent, scores = select_fixed_plan(env, source.tasks("train")[:60], env.cfg.search_k)
    assert len(scores) == len(PLANS)
    best = max(s["task_quality"] + s["preference"] for s in scores)
    chosen = next(s for s in scores if s["plan"] == agent.plan.label)
    assert chosen["task_quality"] + chosen["preference"] == best
    pop = summarise(run_episodes(env, popularity_agent(), source.tasks("train")[:60]))
    assert best >= pop["task_quality"] + pop["preference"]  # popularity/search is one of the plans


def test_greedy_agent_scores_in_bounded_calls_with_the_same_slates(results, source):
    """An open request's pool is the whole catalogue: the agent caps the pairs per reward-model
    call (here one task per call) and recommends exactly what one call for all would."""
    for which in ("warm", "cold"):
        small = run_episodes(
            source.env(), GreedyRewardAgent(source.reward_model, max_pairs=1), source.tasks(which)
        )
        assert small["slate"].to_list() == results[("greedy_reward", which)]["slate"].to_list()


def test_oracle_true_ranks_the_feasible_items_by_true_interest(results, source):
    c, truth = source.catalogue, source.truth
    tasks = source.tasks("warm")
    df = run_episodes(source.env(), oracle_true_agent(truth.interest), tasks)
    t = tasks[0]
    pool = [c.item_ids[r] for r in np.flatnonzero(c.mask(t.request.category, t.request.constraints))]
    s = truth.interest([t.user_id] * len(pool), pool)
    assert df["slate"][0].to_list() == [pool[j] for j in np.argsort(-s, kind="stable")[:10]]
    # Same pool, same slate size, best true interest first: no agent of the pool does better.
    assert summarise(df)["true_preference"] >= summarise(results[("popularity", "warm")])["true_preference"]
