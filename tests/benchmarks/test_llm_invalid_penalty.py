"""``benchmarks/llm_invalid_penalty.py`` (the study itself is not run in CI): the warm start's
demonstrations mark exactly the scripted calls' tokens, teacher forcing on them takes the tiny
random model from no valid call to some, and the summary pairs the arms by seed."""

from __future__ import annotations

import json

import pytest

from benchmarks.llm_invalid_penalty import PAIRED, demonstrations, evaluate, paired, sft_step

pytestmark = pytest.mark.llm

#: Teacher-forcing steps on one demonstration: its calls come out valid from about 80 (seed 0).
STEPS = 100


def test_demonstrations_mark_the_calls_and_teacher_forcing_makes_them_valid(tiny_llm, source) -> None:
    import torch

    from parpo.policy.llm.config import LLMPolicyConfig
    from parpo.policy.llm.policy import LLMPolicy

    torch.manual_seed(0)
    cfg = LLMPolicyConfig(model=str(tiny_llm), max_new_tokens=96, top_candidates=5)
    policy = LLMPolicy.create(cfg, source.reward_model, source.catalogue)
    engine = policy.engine
    task = source.tasks("train")[0]
    (demo,) = demonstrations(policy, source, [task], seed=0)
    assert policy.engine is engine  # the scripted engine was only borrowed
    search, recommend = (json.loads(t) for t in demo.texts)
    assert search["tool"] == "search" and search.get("category") == task.request.category
    assert recommend == {"tool": "recommend", "items": ["c1", "c2", "c3"]}
    # the trained-on tokens are the two calls, each closed by its stop token, and nothing else
    generated = [t for t, m in zip(demo.ids, demo.mask, strict=True) if m]
    assert policy.tokenizer.decode(generated, skip_special_tokens=False) == "".join(
        t + "<|im_end|>" for t in demo.texts
    )
    env = source.env()
    assert evaluate(policy, env, [task])["invalid_call_rate"] == 1.0  # random weights: no valid call
    opt = torch.optim.AdamW(policy.model.parameters(), lr=1e-2)
    policy.model.train()
    losses = [sft_step(policy.model, opt, [demo], policy.pad_id) for _ in range(STEPS)]
    policy.model.eval()
    assert losses[-1] < losses[0] / 20
    after = evaluate(policy, env, [task])
    assert after["invalid_call_rate"] < 1.0 and after["no_slate"] == 0.0


def _run(arm: str, seed: int, rate: float, lr: float = 3e-3) -> dict:
    setup = {"model": "/m", "updates": 20, "episodes_per_update": 16, "lr": lr, "eval_tasks": 32}
    return {"arm": arm, "seed": seed, **setup, **dict.fromkeys(PAIRED, 0.0), "eval_invalid_call_rate": rate}


def test_paired_differences_match_arms_by_seed_within_one_setup():
    lines = [
        {"arm": "warm_start", "seed": 0},  # not an arm
        _run("none", 0, 0.6), _run("penalty", 0, 0.5),
        _run("none", 1, 0.7), _run("penalty", 1, 0.4),
        _run("none", 1, 0.8),  # seed 1 recorded again: the last line counts
        _run("none", 2, 0.9),  # no penalty run of seed 2: unpaired
        _run("penalty", 0, 0.1, lr=1e-3),  # another setup, without its none arm
    ]  # fmt: skip
    (row,) = paired(lines)
    assert row["seeds"] == [0, 1] and row["lr"] == 3e-3
    # seed 0: 0.5 - 0.6 = -0.1; seed 1: 0.4 - 0.8 = -0.4
    assert row["eval_invalid_call_rate"] == {
        "none": 0.7,
        "penalty": 0.45,
        "diff": -0.25,
        "diffs": [-0.1, -0.4],
    }
    assert row["eval_task_quality"]["diffs"] == [0.0, 0.0]
