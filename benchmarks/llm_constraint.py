"""What constrained decoding (``policy.constrained_decoding``) costs the ``hf`` engine, and what it
buys: the same first-turn prompts generated with and without the JSON prefix constraint, in the
same run, interleaved over ``--repeats``.

Workload: ``--prompts`` first prompts of the LLM agent (rules + the action JSON Schema, a profile,
a request per prompt), one batched ``HFEngine.generate`` of at most ``--new-tokens`` tokens,
sampled at temperature 1 (seeded), float32 on CPU. A constrained row stops as soon as its call is
complete, so whole-call times differ for that reason too: the comparison is per decoding step
(``s_per_step``: the call's wall time over its longest row, the steps ``generate`` ran), and
``mask_s``, the time spent in the constraint's logits processor itself (``mask_share`` of the
constrained call's wall time, ``mask_ms_per_step`` per decoding step), which the load of a shared
machine disturbs less. Wall times include the prompts' prefill.
``build_s``: building the constraint over the vocabulary (once per policy). ``valid_rate``:
calls that parse to a typed action (``parse.parse_call``). Prints one JSON line per model with
medians and ``step_slowdown`` (constrained / free ``s_per_step``).

    python benchmarks/llm_constraint.py --model tiny --repeats 3
    python benchmarks/llm_constraint.py --model /path/to/smollm2 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def first_prompts(n: int) -> list[list[dict[str, str]]]:
    from parpo.policy.llm.prompt import system_message

    cats = ["shoes", "books", "games", "garden"]
    return [
        [
            system_message(False),
            {"role": "user", "content": json.dumps({
                "profile": {"top_categories": [cats[i % 4]], "top_attributes": ["red"], "cold": False},
                "request": {"category": cats[i % 4], "constraints": {"price_max": 20.0 + i}},
                "slate_size": 10, "max_calls": 3})},
        ]
        for i in range(n)
    ]  # fmt: skip


def run(model_dir: str, a: argparse.Namespace) -> dict[str, object]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from parpo.policy.llm import engine as engine_mod
    from parpo.policy.llm.constrain import ToolCallConstraint, token_texts
    from parpo.policy.llm.conversation import DEFAULT_TEMPLATE
    from parpo.policy.llm.engine import HFEngine
    from parpo.policy.llm.parse import parse_call
    from parpo.policy.llm.policy import stop_ids

    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    stop = stop_ids(tok, model)
    pad = tok.pad_token_id if tok.pad_token_id is not None else stop[0]
    template = getattr(tok, "chat_template", None) or DEFAULT_TEMPLATE
    prompts = [tok(tok.apply_chat_template(m, chat_template=template, tokenize=False, add_generation_prompt=True),
                   add_special_tokens=False)["input_ids"] for m in first_prompts(a.prompts)]  # fmt: skip
    t0 = time.perf_counter()
    constraint = ToolCallConstraint(token_texts(tok, model.config.vocab_size), stop)
    build_s = time.perf_counter() - t0
    engines = {"free": HFEngine(model, pad, stop), "constrained": HFEngine(model, pad, stop, constraint)}
    # The processor's own time (masks and states), robust to the load of a shared machine.
    inside = [0.0]
    call = engine_mod.ConstraintMasks.__call__

    def timed(self, input_ids, scores):  # noqa: ANN001, ANN202
        t = time.perf_counter()
        out = call(self, input_ids, scores)
        inside[0] += time.perf_counter() - t
        return out

    engine_mod.ConstraintMasks.__call__ = timed
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in engines}
    for r in range(a.repeats):
        for name, engine in engines.items():
            gen = torch.Generator().manual_seed(r)
            inside[0] = 0.0
            t0 = time.perf_counter()
            out = engine.generate(prompts, [a.new_tokens] * len(prompts), temperature=1.0, greedy=False,
                                  generator=gen)  # fmt: skip
            wall = time.perf_counter() - t0
            steps = max(len(g.tokens) for g in out)
            texts = [tok.decode(g.tokens, skip_special_tokens=True) for g in out]
            runs[name].append({
                "wall_s": wall, "steps": steps, "s_per_step": wall / max(steps, 1), "mask_s": inside[0],
                "tokens": sum(len(g.tokens) for g in out),
                "valid_rate": sum(not isinstance(parse_call(t, []), str) for t in texts) / len(texts),
            })  # fmt: skip
    med = {k: {m: statistics.median(x[m] for x in v) for m in v[0]} for k, v in runs.items()}
    return {
        "model": a.model, "vocab": model.config.vocab_size, "prompts": a.prompts, "new_tokens": a.new_tokens,
        "repeats": a.repeats, "threads": a.threads, "build_s": round(build_s, 3),
        **{k: {m: round(x, 4) for m, x in v.items()} for k, v in med.items()},
        "step_slowdown": round(med["constrained"]["s_per_step"] / med["free"]["s_per_step"], 3),
        "mask_share": round(med["constrained"]["mask_s"] / med["constrained"]["wall_s"], 3),
        "mask_ms_per_step": round(1000 * med["constrained"]["mask_s"] / med["constrained"]["steps"], 2),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny", help="'tiny' (the tests' model) or a local model folder")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    if a.model == "tiny":
        from tests.plugins.llm import build_tiny_llm

        with tempfile.TemporaryDirectory() as d:
            print(json.dumps(run(str(build_tiny_llm(Path(d) / "model")), a)))
    else:
        print(json.dumps(run(a.model, a)))


if __name__ == "__main__":
    main()
