"""The evaluation's task sample: hash-stable (the same tasks whatever the order, for every agent
and version; data that grows keeps its old sample but for the displaced), small sets kept whole,
and an evaluation on a sample equal, task for task, to the full one on the tasks it keeps."""

from __future__ import annotations

import random

import polars as pl
import pytest

from parpo.env import Request, Task
from parpo.evaluation.policy_eval import evaluate_policy, read_tasks
from parpo.evaluation.sample import EvalSample, sample_tasks
from tests.parpo.evaluation.test_compare import two_policies  # noqa: F401


def tasks(n: int, start: int = 0) -> list[Task]:
    return [Task(f"warm/{i}", f"u{i}", Request(), target=f"i{i % 7}") for i in range(start, start + n)]


def ids(ts: list[Task]) -> list[str]:
    return [t.user_id for t in ts]


def test_small_sets_are_kept_whole_and_in_order():
    ts = tasks(5)
    assert sample_tasks(ts, 5) == ts and sample_tasks(ts, None) == ts and sample_tasks(ts, 9) == ts


def test_the_sample_depends_on_the_tasks_only():
    ts = tasks(200)
    picked = sample_tasks(ts, 30)
    assert len(picked) == 30 and len(set(ids(picked))) == 30
    assert ids(picked) == sorted(ids(picked), key=lambda u: int(u[1:]))  # original order kept
    shuffled = ts[:]
    random.Random(1).shuffle(shuffled)
    assert set(ids(sample_tasks(shuffled, 30))) == set(ids(picked))
    # Renumbered task ids (another draw order) do not move it; another seed does.
    renamed = [Task(f"x{i}", t.user_id, t.request, t.target) for i, t in enumerate(ts)]
    assert ids(sample_tasks(renamed, 30)) == ids(picked)
    assert set(ids(sample_tasks(ts, 30, seed=1))) != set(ids(picked))


def test_growing_data_keeps_the_old_sample_but_for_the_displaced():
    old, grown = tasks(200), tasks(250)  # 50 new users
    a, b = set(ids(sample_tasks(old, 30))), set(ids(sample_tasks(grown, 30)))
    new = set(ids(grown)) - set(ids(old))
    assert b - new <= a  # an old task in the new sample was in the old one
    assert len(a - b) == len(b & new)  # each new task entering displaced exactly one old task


def test_evaluation_on_a_sample_is_the_full_one_on_the_tasks_it_keeps(two_policies, tiny_synth):  # noqa: F811
    reg, (v1, v2) = two_policies
    small = EvalSample(warm=7, cold=5, n_boot=200)
    p1, r1 = evaluate_policy(reg, tiny_synth, v1, sample=small)
    p2, r2 = evaluate_policy(reg, tiny_synth, v2, sample=small)
    pf, full = evaluate_policy(reg, tiny_synth, v1, sample=EvalSample.full())
    t1, t2, tf = read_tasks(p1), read_tasks(p2), read_tasks(pf)
    for part, n in (("warm", 7), ("cold", 5)):
        assert r1[part]["n_tasks"] == n < r1[part]["tasks_available"] == full[part]["n_tasks"]
        per_agent = t1.filter(pl.col("part") == part).group_by("agent").agg(pl.col("task_id").sort())
        assert per_agent["task_id"].n_unique() == 1  # every agent on the same tasks
        policy_ids = [
            sorted(t.filter((pl.col("part") == part) & (pl.col("agent") == "policy"))["task_id"])
            for t in (t1, t2)
        ]
        assert policy_ids[0] == policy_ids[1]  # and every version
        for agent in ("policy", "popularity", "greedy_reward"):  # deterministic agents
            cols = ["task_id", "slate", "hit@10", "task_quality", "preference"]
            got = t1.filter((pl.col("part") == part) & (pl.col("agent") == agent)).select(cols)
            ref = tf.filter((pl.col("part") == part) & (pl.col("agent") == agent)).select(cols)
            ref = ref.join(got.select("task_id"), on="task_id", how="semi")
            assert got.drop("preference").equals(ref.drop("preference")), agent
            # The reward model's percentiles compare a slate item with its own reference score,
            # computed by a matmul whose rounding depends on the batch: a tie can flip, moving
            # the reward by at most 1 / (2 x reference items) = 1 / 320 here.
            assert got["preference"].to_list() == pytest.approx(ref["preference"].to_list(), abs=1 / 320)
        for agent, ci in r1[part]["ci95"].items():
            means = r1[part]["policy"] if agent == "policy" else r1[part]["baselines"][agent]
            for m, (lo, hi) in ci.items():
                assert lo - 1e-12 <= means[m] <= hi + 1e-12, (part, agent, m)
    assert r1["sample"] == small.model_dump() and full["sample"]["warm"] is None
    # On sets smaller than the default sample, the default evaluation is the full one.
    _, default = evaluate_policy(reg, tiny_synth, v1)
    assert {k: v for k, v in default.items() if k != "sample"} == {
        k: v for k, v in full.items() if k != "sample"
    }
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        EvalSample(warm=0)
