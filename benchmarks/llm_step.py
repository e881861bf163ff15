"""One single-turn GRPO-style step of the LLM backend next to TRL's ``GRPOTrainer`` (issue 20).

The same workload for both, in the same run: ``--prompts`` chat prompts x ``--completions``
completions of exactly ``--new-tokens`` new tokens (end of turn suppressed), HF ``generate``
(temperature 1, top-k/top-p off), a constant reward (so every advantage is 0: the update's cost
is measured, not its effect), PPO-clip (eps 0.2, no dual clip), token-mean aggregation over the
whole batch (TRL's ``dapo``), no KL, one optimiser step (AdamW, lr 1e-5, grad-norm clip 1.0)
with micro-batches of ``--micro-batch`` completions, float32 on CPU.

- ``ours``: ``HFEngine.generate`` on the 128 prompts, the episodes padded (``pad_batch``),
  ``compute_advantages`` (grpo) and ``ppo_update`` of ``parpo.policy.llm.trainer``.
- ``trl``: ``GRPOTrainer(...).train()`` with ``max_steps=1``, ``num_generations`` =
  completions, ``per_device_train_batch_size`` = micro-batch, gradient accumulation over the
  whole generation batch; its generation is timed by wrapping ``_generate_and_score_completions``
  and the update is the rest of ``train()``.

Each contender runs in its own subprocess per repeat (interleaved), so ``peak_rss_mb`` is its
own (``VmHWM``). Models: ``tiny`` (the tests' 2-layer Llama, built in a temp folder) or a
local model folder (``--model PATH``; SmolLM2: ``parpo.policy.llm.model.gguf_to_folder``).
Prints one JSON line per model with medians over ``--repeats`` and ``step_time_ratio_vs_trl``
(ours / TRL's total step time; below 1 is faster).

    python benchmarks/llm_step.py --model tiny --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def prompts(n: int) -> list[list[dict[str, str]]]:
    return [
        [
            {
                "role": "user",
                "content": f"User u{i} asks for running shoes under {40 + i}. Reply with one JSON call.",
            }
        ]
        for i in range(n)
    ]


def run_ours(model_dir: str, a: argparse.Namespace) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from parpo.algorithms import build_optimizers, compute_advantages
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.policy.llm.conversation import Conversation
    from parpo.policy.llm.engine import HFEngine
    from parpo.policy.llm.logprobs import pad_batch
    from parpo.policy.llm.trainer import ppo_update

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = LLMTrainConfig.model_validate({
        "advantage": {"estimator": "grpo"},
        "loss": {"dual_clip_c": None},
        "optim": {"lr": 1e-5},
        "train": {"micro_batch_size": a.micro_batch, "minibatches": 1, "ppo_epochs": 1, "max_grad_norm": 1.0},
    })  # fmt: skip
    texts = [
        tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts(a.prompts)
    ]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts for _ in range(a.completions)]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    engine = HFEngine(model, pad, stop_ids=[])  # no stop token: exactly new-tokens per completion
    model.eval()
    t0 = time.perf_counter()
    gens = engine.generate(ids, [a.new_tokens] * len(ids), temperature=1.0, greedy=False,
                           generator=torch.Generator().manual_seed(0))  # fmt: skip
    t1 = time.perf_counter()
    convs = [Conversation([], [*p, *g.tokens], [False] * len(p) + [True] * len(g.tokens),
                          [0.0] * len(p) + g.logp, "") for p, g in zip(ids, gens, strict=True)]  # fmt: skip
    n = len(convs)
    rewards = {"task/constant": torch.ones(n)}
    group = torch.arange(a.prompts).repeat_interleave(a.completions)
    adv, _ = compute_advantages(rewards, group, torch.zeros(n, dtype=torch.int64), None, cfg.advantage)
    model.train()
    batch = pad_batch(convs, pad)
    batch["old_logp"] = batch["rollout_logp"]

    class _P:  # what ppo_update reads of a policy (no constrained decoding: no allowed-token masks)
        def allowed_masks(self, *_: object) -> None:
            return None

    pol = _P()
    pol.model, pol.temperature, pol.device, pol.value_head = model, 1.0, torch.device("cpu"), None
    ppo_update(pol, build_optimizers(model, cfg.optim), batch, adv, cfg, torch.Generator().manual_seed(0))
    t2 = time.perf_counter()
    assert all(len(g.tokens) == a.new_tokens for g in gens)
    return {"generate_s": t1 - t0, "update_s": t2 - t1}


def run_trl(model_dir: str, a: argparse.Namespace) -> dict[str, float]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    total = a.prompts * a.completions
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out, per_device_train_batch_size=a.micro_batch,
            gradient_accumulation_steps=total // a.micro_batch, num_generations=a.completions,
            max_completion_length=a.new_tokens, generation_kwargs={"min_new_tokens": a.new_tokens},
            max_steps=1, beta=0.0, learning_rate=1e-5, max_grad_norm=1.0, loss_type="dapo", epsilon=0.2,
            temperature=1.0, top_k=0, top_p=1.0, report_to=[], save_strategy="no", logging_steps=1,
            use_cpu=True, bf16=False, fp16=False, seed=0, dataloader_num_workers=0, disable_tqdm=True,
        )  # fmt: skip
        data = Dataset.from_list([{"prompt": p} for p in prompts(a.prompts)])
        trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [1.0] * len(completions)],
                              args=args, train_dataset=data, processing_class=tok)  # fmt: skip
        spent = [0.0]
        inner = trainer._generate_and_score_completions

        def timed(*x, **kw):
            s = time.perf_counter()
            r = inner(*x, **kw)
            spent[0] += time.perf_counter() - s
            return r

        trainer._generate_and_score_completions = timed
        t0 = time.perf_counter()
        trainer.train()
        t = time.perf_counter() - t0
    return {"generate_s": spent[0], "update_s": t - spent[0]}


def child(a: argparse.Namespace) -> None:
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    out = (run_ours if a.child == "ours" else run_trl)(a.model_dir, a)
    print(json.dumps({**out, "peak_rss_mb": peak_rss_mb()}), flush=True)


def tiny_model(folder: Path) -> str:
    sys.path.insert(0, str(ROOT))
    from tests.plugins.llm import build_tiny_llm

    return str(build_tiny_llm(folder / "tiny"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="tiny, or a local Hugging Face model folder")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--completions", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads per child (0: torch's default)")
    p.add_argument("--child", choices=["ours", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = tiny_model(Path(tmp)) if a.model == "tiny" else a.model
        flags = ["--prompts", str(a.prompts), "--completions", str(a.completions), "--new-tokens",
                 str(a.new_tokens), "--micro-batch", str(a.micro_batch), "--threads", str(a.threads)]  # fmt: skip
        runs: dict[str, list[dict[str, float]]] = {"ours": [], "trl": []}
        for r in range(a.repeats):
            for who in ("ours", "trl"):
                res = subprocess.run([sys.executable, __file__, "--child", who, "--model-dir", model_dir, *flags],
                                     capture_output=True, text=True, cwd=ROOT)  # fmt: skip
                if res.returncode != 0:
                    sys.exit(f"{who} failed:\n{res.stderr[-3000:]}")
                runs[who].append(json.loads(res.stdout.strip().splitlines()[-1]))
                print(f"repeat {r} {who}: {runs[who][-1]}", file=sys.stderr)
    med = {
        w: {k: statistics.median(x[k] for x in v) for k in ("generate_s", "update_s")}
        for w, v in runs.items()
    }
    step = {w: m["generate_s"] + m["update_s"] for w, m in med.items()}
    print(json.dumps({
        "bench": "llm_step", "model": a.model, "prompts": a.prompts, "completions": a.completions,
        "new_tokens": a.new_tokens, "micro_batch": a.micro_batch, "repeats": a.repeats,
        **{f"{w}_{k}": round(v, 3) for w, m in med.items() for k, v in m.items()},
        "ours_step_s": round(step["ours"], 3), "trl_step_s": round(step["trl"], 3),
        "step_time_ratio_vs_trl": round(step["ours"] / step["trl"], 3),
        "ours_peak_rss_mb": round(max(x["peak_rss_mb"] for x in runs["ours"]), 1),
        "trl_peak_rss_mb": round(max(x["peak_rss_mb"] for x in runs["trl"]), 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
