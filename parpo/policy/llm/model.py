"""Loading and saving the language model: a local Hugging Face folder (never the hub), optional
LoRA adapters (peft), and the base model's sha256 that a LoRA policy is checked against.

A policy folder holds ``llm.json`` (config, whether LoRA, the base model's path hint and
sha256), ``tokenizer/`` and either ``model/`` (full weights, safetensors) or ``adapter/`` (LoRA
adapters only; the base is loaded from the hint and must hash to the recorded sha256).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from parpo.policy.llm.config import LLMPolicyConfig, LoraConfig
from parpo_core.errors import UserError

META, TOKENIZER, MODEL, ADAPTER = "llm.json", "tokenizer", "model", "adapter"
#: Version of the folder layout above (``llm.json``'s ``format``).
FORMAT = 1


def require_llm_extra() -> None:
    """One line naming the extra when transformers or peft is missing."""
    try:
        import peft  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise UserError(f"the llm policy backend needs the llm extra ({e.name} is missing): "
                        "pip install 'parpo[llm]'") from None  # fmt: skip


def weights_sha256(path: str | Path) -> str:
    """sha256 over a model folder's weight files (``*.safetensors``, ``*.bin``, ``*.gguf``), by name."""
    root = Path(path)
    files = sorted(p for ext in ("*.safetensors", "*.bin", "*.gguf") for p in root.glob(ext))
    h = hashlib.sha256()
    for f in files:
        digest = hashlib.sha256()
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        h.update(f"{f.name}\0{digest.hexdigest()}\n".encode())
    return h.hexdigest()


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def load_pretrained(path: str | Path, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) from a local folder; a folder without a model is one line."""
    from transformers import AutoTokenizer

    model = load_model(path, dtype)
    return model, AutoTokenizer.from_pretrained(Path(path), local_files_only=True)


def load_model(path: str | Path, dtype: str = "float32") -> Any:
    """The model alone (a policy folder keeps its tokenizer apart); a folder without one is one line."""
    require_llm_extra()
    from transformers import AutoModelForCausalLM

    root = Path(path)
    if not (root / "config.json").is_file():
        raise UserError(f"{root}: no model here (config.json missing); --model names a local Hugging Face "
                        "model folder (no hub access at run time)")  # fmt: skip
    return AutoModelForCausalLM.from_pretrained(root, dtype=_dtype(dtype), local_files_only=True)


def gguf_to_folder(gguf: str | Path, out: str | Path) -> Path:
    """A GGUF model file (dequantised by transformers through ``gguf``) re-saved as a Hugging Face
    folder with safetensors weights, for ``--model``. ``save_pretrained`` on the GGUF-loaded model
    raises, so its weights are copied into a fresh model of the same config first."""
    require_llm_extra()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, dst = Path(gguf), Path(out)
    if not src.is_file():
        raise UserError(f"{src}: no such GGUF file")
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    loaded = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # the weights are dequantised: the folder is plain fp32
        del config.quantization_config  # (else trainers such as TRL's refuse it as a quantised model)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(dst)
    tok.save_pretrained(dst)
    return dst


def add_lora(model: Any, cfg: LoraConfig) -> Any:
    """``model`` with fresh LoRA adapters (only they require grad)."""
    from peft import LoraConfig as PeftLora
    from peft import get_peft_model

    lc = PeftLora(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                  target_modules=list(cfg.target_modules), task_type="CAUSAL_LM")  # fmt: skip
    return get_peft_model(model, lc)


def is_lora(model: Any) -> bool:
    return hasattr(model, "peft_config")


def save(directory: str | Path, model: Any, tokenizer: Any, cfg: LLMPolicyConfig,
         base: dict[str, str] | None) -> None:  # fmt: skip
    """The policy folder (see the module docstring); ``base``: ``{"path", "sha256"}`` for LoRA."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(d / TOKENIZER)
    lora = is_lora(model)
    model.save_pretrained(d / (ADAPTER if lora else MODEL), safe_serialization=True)
    meta = {"backend": "llm", "format": FORMAT, "config": cfg.model_dump(mode="json"), "lora": lora,
            "base": base if lora else None}  # fmt: skip
    (d / META).write_text(json.dumps(meta, indent=2) + "\n")


def load(directory: str | Path) -> tuple[Any, Any, LLMPolicyConfig, dict[str, str] | None]:
    """(model, tokenizer, config, base) of a policy folder; a LoRA policy's base must be at its
    hint and hash to its sha256, else one line naming both."""
    require_llm_extra()
    from transformers import AutoTokenizer

    d = Path(directory)
    meta = json.loads((d / META).read_text())
    if meta.get("format") != FORMAT:
        raise UserError(f"{d}: llm policy format {meta.get('format')!r}; this version reads format {FORMAT}")
    # Policies saved before ``personal_features`` existed were prompted without them.
    cfg = LLMPolicyConfig.model_validate({"personal_features": False, **meta["config"]})
    tok = AutoTokenizer.from_pretrained(d / TOKENIZER, local_files_only=True)
    if not meta["lora"]:
        return load_model(d / MODEL, cfg.dtype), tok, cfg, None
    base = meta["base"]
    where = Path(base["path"])
    found = weights_sha256(where) if (where / "config.json").is_file() else None
    if found != base["sha256"]:
        state = "is missing" if found is None else f"has sha256 {found}"
        raise UserError(f"{d}: LoRA policy needs base model {where} with sha256 {base['sha256']}, "
                        f"but {where} {state}")  # fmt: skip
    from peft import PeftModel

    model = load_model(where, cfg.dtype)
    return PeftModel.from_pretrained(model, d / ADAPTER, is_trainable=True), tok, cfg, base
