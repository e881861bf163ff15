"""The LLM backend on one GPU (issue 20), run by ``benchmarks/gpu_check.sh``: HF ``generate``
rollouts (``HFEngine``) and LoRA PARPO updates (``training_batch`` + ``ppo_update`` of
``parpo.policy.llm.trainer``) of a randomly initialised ~0.5B Llama built from a config here (no
hub, no tokenizer: token-level episodes of random prompts), with the ``llm-gpu`` preset's
settings: bf16, gradient checkpointing, LoRA r 16, TIS (the trainer rescores the episodes, so the
engine-vs-trainer log-prob gap is measured on every generated token).

Prints one JSON line: ``tokens_per_s`` (generated tokens over the rollout's wall time),
``update_s`` (the PPO update: rescoring + one optimiser step over all episodes), the log-prob
gap (max and mean |trainer - engine| over generated tokens), peak GPU memory, and whether the
LoRA weights moved. ``GPU_CHECK_TINY=1``: a tiny model in float32 on CPU, so the script itself is
tested where no GPU is.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]

#: ~0.5B (Qwen2-0.5B's shape: 494M parameters with tied embeddings) and the tiny CPU stand-in.
SIZES = {
    "0.5b": {"vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2},
    "tiny": {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2},
}  # fmt: skip
#: episodes (tasks x G), prompt tokens, new tokens per episode
WORKLOADS = {"0.5b": (64, 512, 128), "tiny": (8, 32, 16)}


def main() -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import yaml
    from transformers import LlamaConfig, LlamaForCausalLM

    from parpo.algorithms import build_optimizers
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.policy.llm.conversation import Conversation
    from parpo.policy.llm.engine import HFEngine
    from parpo.policy.llm.model import add_lora
    from parpo.policy.llm.trainer import ppo_update, training_batch

    tiny = os.environ.get("GPU_CHECK_TINY") == "1"
    size = "tiny" if tiny else "0.5b"
    device = torch.device("cpu" if tiny else "cuda")
    dtype = torch.float32 if tiny else torch.bfloat16
    episodes, prompt_len, new_tokens = WORKLOADS[size]
    preset = yaml.safe_load((ROOT / "configs" / "policy" / "llm-gpu.yaml").read_text())
    preset["runtime"]["device"] = str(device)
    preset["policy"].update(dtype="float32" if tiny else "bfloat16", max_new_tokens=new_tokens)
    preset["train"].update(tasks_per_update=episodes // 8, group_size=8, micro_batch_size=8)
    cfg = LLMTrainConfig.model_validate(preset)

    torch.manual_seed(0)
    pad, stop = 0, 1  # a random model almost never samples the stop id: every turn runs its budget
    conf = LlamaConfig(**SIZES[size], max_position_embeddings=4096, tie_word_embeddings=True,
                       pad_token_id=pad, eos_token_id=stop, bos_token_id=None)  # fmt: skip
    t0 = time.perf_counter()
    base = LlamaForCausalLM(conf).to(device=device, dtype=dtype)
    params = sum(p.numel() for p in base.parameters())
    model = add_lora(base, cfg.policy.lora)
    model.gradient_checkpointing_enable()
    build_s = time.perf_counter() - t0
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(2, conf.vocab_size, (episodes, prompt_len), generator=gen).tolist()
    engine = HFEngine(model, pad, [stop])
    model.eval()
    sync()
    t0 = time.perf_counter()
    out = engine.generate(prompts, [new_tokens] * episodes, temperature=cfg.policy.temperature, greedy=False,
                          generator=gen)  # fmt: skip
    sync()
    rollout_s = time.perf_counter() - t0
    convs = [
        Conversation([], p + g.tokens, [False] * len(p) + [True] * len(g.tokens), [0.0] * len(p) + g.logp, "")
        for p, g in zip(prompts, out, strict=True)
    ]
    # The trainer's functions need the model, its sampling temperature, the pad id and the
    # constraint's masks (none here): a stand-in for LLMPolicy, which also renders prompts.
    policy = SimpleNamespace(model=model, temperature=cfg.policy.temperature, device=device, pad_id=pad,
                             allowed_masks=lambda *_: None, value_head=None)  # fmt: skip
    optimizers = build_optimizers(model, cfg.optim)
    adv = torch.randn(episodes, generator=gen)  # a fixed, non-degenerate advantage per episode
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    model.train()
    sync()
    t0 = time.perf_counter()
    batch = training_batch(policy, convs, cfg)  # TIS: rescored by the trainer
    metrics = ppo_update(policy, optimizers, batch, adv, cfg, torch.Generator().manual_seed(1))
    sync()
    update_s = time.perf_counter() - t0
    m = batch["mask"]
    gap = (batch["old_logp"] - batch["rollout_logp"])[m].abs()
    generated = int(m.sum())
    moved = max(float((p.detach() - lora[n]).abs().max()) for n, p in model.named_parameters() if n in lora)
    print(json.dumps({
        "bench": "gpu_check", "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "size": size, "dtype": str(dtype).removeprefix("torch."), "params_m": round(params / 1e6, 1),
        "trainable_m": round(sum(p.numel() for p in lora.values()) / 1e6, 2), "episodes": episodes,
        "prompt_tokens": prompt_len, "new_tokens": new_tokens, "generated_tokens": generated,
        "build_s": round(build_s, 2), "rollout_s": round(rollout_s, 2),
        "tokens_per_s": round(generated / rollout_s, 1), "update_s": round(update_s, 2),
        "logp_gap_max": float(gap.max()), "logp_gap_mean": float(gap.mean()),
        "is_weight_mean": float(batch["is_weights"][m].mean()), "loss": metrics.get("actor/loss"),
        "lora_max_change": moved,
        "peak_gpu_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.type == "cuda" else None,
    }))  # fmt: skip
    if not moved > 0:
        sys.exit("gpu_check: the LoRA weights did not move in the update")


if __name__ == "__main__":
    main()
