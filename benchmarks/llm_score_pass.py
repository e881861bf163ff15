"""The LLM trainer's scoring pass with gradients (issue 20): ``token_scores`` projecting onto the
vocabulary only the positions whose next token was generated (``logits_to_keep``: the union of
the micro-batch's generated positions) next to projecting every position (what it did before:
the logits of the whole episode, then the generated positions selected), on the same batch, in
the same run. Each pass is what a PPO micro-batch costs: the forward with gradients, the
log-softmax, entropies and log-probs of the generated tokens, and the backward of their sum.

The batch and the model are ``llm_value_pass.py``'s (a random Llama of SmolLM2-135M's shape,
episodes of random tokens with three generated turns). Each contender runs in its own
subprocess per repeat (interleaved), so ``peak_rss_mb`` (``VmHWM``) is its own. Prints one JSON
line with medians, ``time_ratio`` / ``rss_ratio`` (positions / all; below 1 is cheaper) and the
largest log-prob gap between the two.

    python benchmarks/llm_score_pass.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(contender: str, a: argparse.Namespace) -> dict[str, float]:
    """Score and backpropagate every micro-batch once with ``contender`` (``positions``, ``all``)."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from llm_value_pass import episode_batch, peak_rss_mb, smollm2_shaped

    from parpo.policy.llm.logprobs import forward, token_scores

    model = smollm2_shaped(a).train()
    batch = episode_batch(a)
    picked = []
    t0 = time.perf_counter()
    for s in range(0, a.episodes, a.micro_batch):
        ids, attn, mask = (batch[k][s : s + a.micro_batch] for k in ("ids", "attention", "mask"))
        if contender == "positions":
            logp, ent, _ = token_scores(model, ids, attn, mask, 1.0)
            lp = logp[:, 1:][mask[:, 1:]]
        else:  # every position's logits, then the generated ones (the code before)
            sel = mask[:, 1:]
            lps = torch.log_softmax(forward(model, ids, attn).logits[:, :-1][sel].float(), dim=-1)
            lp = lps.gather(-1, ids[:, 1:][sel].unsqueeze(-1)).squeeze(-1)
            ent = -(lps.exp() * lps).sum(-1)
        (lp.sum() + 0.0 * ent.sum()).backward()
        picked.append(lp.detach())
    seconds = time.perf_counter() - t0
    out = Path(a.out) / f"{contender}.pt"
    torch.save(torch.cat(picked), out)
    return {"seconds": seconds, "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--tokens", type=int, default=1024, help="tokens per episode")
    p.add_argument("--generated", type=int, default=96, help="generated tokens per episode (3 turns)")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--child", choices=["positions", "all"], help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    if a.child:
        print(json.dumps(one(a.child, a)))
        return
    import tempfile

    import torch

    runs: dict[str, list[dict[str, float]]] = {"positions": [], "all": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeats):
            for c in runs:  # interleaved, so drift in the machine's load hits both
                out = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--child", c, "--out", tmp],
                                     check=True, capture_output=True, text=True).stdout  # fmt: skip
                runs[c].append(json.loads(out.strip().splitlines()[-1]))
        gap = float((torch.load(Path(tmp) / "positions.pt") - torch.load(Path(tmp) / "all.pt")).abs().max())
    med = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in runs.items()}
    print(json.dumps({
        "bench": "llm_score_pass", "episodes": a.episodes, "tokens": a.tokens, "generated": a.generated,
        "micro_batch": a.micro_batch, "layers": a.layers, "vocab": a.vocab, "threads": a.threads,
        "repeats": a.repeats, "positions_s": round(med["positions"]["seconds"], 3),
        "all_s": round(med["all"]["seconds"], 3),
        "positions_peak_rss_mb": round(med["positions"]["peak_rss_mb"]), "all_peak_rss_mb": round(med["all"]["peak_rss_mb"]),
        "time_ratio": round(med["positions"]["seconds"] / med["all"]["seconds"], 3),
        "rss_ratio": round(med["positions"]["peak_rss_mb"] / med["all"]["peak_rss_mb"], 3),
        "max_logp_gap": gap,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
