"""The LLM trainer's critic pass with ``loss.tis`` off (issue 23): ``behaviour_values`` (hidden
states only, the vocabulary projected at one position) next to ``behaviour_scores`` (the full
scoring it replaced: every position's logits, the log-softmax and entropies of the generated
tokens, and the values), on the same batch, in the same run.

The batch: ``--episodes`` episodes of ``--tokens`` tokens, ``--generated`` of them generated
(three turns spread over the episode, the rest prompt and tool results), token ids drawn at
random. The model: a randomly initialised Llama of SmolLM2-135M's shape by default (hidden 576,
30 layers, 9 heads, 3 KV heads, vocabulary 49,152; ``--layers`` to shorten it): timing needs
the shape, not trained weights. Each contender runs in its own subprocess per repeat
(interleaved), so ``peak_rss_mb`` (``VmHWM``) is its own. Prints one JSON line with medians and
``time_ratio`` / ``rss_ratio`` (values-only / full; below 1 is cheaper).

    python benchmarks/llm_value_pass.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def smollm2_shaped(a: argparse.Namespace) -> Any:
    """A randomly initialised Llama of SmolLM2-135M's shape (``a.layers`` layers, ``a.vocab``
    tokens), after seeding torch and setting ``a.threads`` threads."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=576, intermediate_size=1536, num_hidden_layers=a.layers,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                      tie_word_embeddings=True)  # fmt: skip
    return LlamaForCausalLM(cfg)


def episode_batch(a: argparse.Namespace) -> dict[str, Any]:
    """``pad_batch``'s fields for ``a.episodes`` episodes of ``a.tokens`` random tokens, ``a.generated``
    of them generated in three turns, each followed by a tool result."""
    import torch

    e, n, g = a.episodes, a.tokens, a.generated
    mask = torch.zeros((e, n), dtype=torch.bool)
    for turn in range(3):
        start = n // 4 * (turn + 1) - g // 3
        mask[:, start : start + g // 3] = True
    return {
        "ids": torch.randint(a.vocab, (e, n)),
        "attention": torch.ones((e, n), dtype=torch.int64),
        "mask": mask,
        "rollout_logp": torch.zeros((e, n)),
    }


def one(contender: str, a: argparse.Namespace) -> dict[str, float]:
    """One timed pass of ``contender`` (``values`` or ``scores``) in this process."""
    from types import SimpleNamespace

    import torch

    from parpo.policy.llm.trainer import behaviour_scores, behaviour_values
    from parpo.policy.llm.value import value_head

    model = smollm2_shaped(a).eval()
    policy = SimpleNamespace(model=model, value_head=value_head(576), device=torch.device("cpu"), temperature=1.0,
                             allowed_masks=lambda *x: None)  # fmt: skip
    batch = episode_batch(a)
    mask = batch["mask"]
    t0 = time.perf_counter()
    if contender == "values":
        behaviour_values(policy, batch, a.micro_batch, mask)
    else:
        behaviour_scores(policy, batch, a.micro_batch, mask)
    return {"seconds": time.perf_counter() - t0, "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--tokens", type=int, default=1024, help="tokens per episode")
    p.add_argument("--generated", type=int, default=96, help="generated tokens per episode (3 turns)")
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", choices=["values", "scores"], help=argparse.SUPPRESS)
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    if a.child:
        print(json.dumps(one(a.child, a)))
        return
    runs: dict[str, list[dict[str, float]]] = {"values": [], "scores": []}
    for _ in range(a.repeats):
        for c in runs:  # interleaved, so drift in the machine's load hits both
            out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", c],
                                 check=True, capture_output=True, text=True).stdout  # fmt: skip
            runs[c].append(json.loads(out.strip().splitlines()[-1]))
    med = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in runs.items()}
    print(json.dumps({
        "bench": "llm_value_pass", "episodes": a.episodes, "tokens": a.tokens, "generated": a.generated,
        "layers": a.layers, "vocab": a.vocab, "threads": a.threads, "repeats": a.repeats,
        "values_s": round(med["values"]["seconds"], 3), "scores_s": round(med["scores"]["seconds"], 3),
        "values_peak_rss_mb": round(med["values"]["peak_rss_mb"]), "scores_peak_rss_mb": round(med["scores"]["peak_rss_mb"]),
        "time_ratio": round(med["values"]["seconds"] / med["scores"]["seconds"], 3),
        "rss_ratio": round(med["values"]["peak_rss_mb"] / med["scores"]["peak_rss_mb"], 3),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
