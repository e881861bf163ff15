"""Rollout engines behind one interface: ``generate(prompts, budgets) -> [Generation]`` with the
log-prob of every generated token, ``sync(model)`` after each update and ``score(ids)`` (the
engine's log-probs of a fixed probe sequence, checked against the trainer's after a sync:
``parpo.policy.llm.sync``).

``hf`` (default, CPU and GPU) runs the trainer's own model through ``transformers``' ``generate``:
the weights are the trainer's, so ``sync`` has nothing to copy. Given a ``ToolCallConstraint``
(``policy.constrained_decoding``) it masks every step's logits (``ConstraintMasks``) and reports
the log-probs of that masked distribution. Sampling is per row (``RowSampler``): row i's draws
come from a stream seeded by the run's generator and i alone, so a batch split across rollout
workers (``parpo.policy.llm.workers``) samples the same tokens. ``vllm``
(``parpo.policy.llm.vllm_engine``) is imported lazily from the ``vllm`` extra; a missing extra is
one line naming it. Engines are looked up by name in ``ENGINES``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from parpo.policy.llm.constrain import ToolCallConstraint
from parpo.policy.llm.logprobs import token_logprobs
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

    def score(self, ids: Sequence[int]) -> dict[str, list[float]]:
        """Per replica of the weights, by name (the engine, or each rollout worker): the log-probs
        [L - 1] of ``ids[1:]`` each given the tokens before it, at temperature 1."""
        ...


#: name -> ``factory(model, pad_id, stop_ids, constraint=None, cfg=None) -> RolloutEngine`` (``cfg``:
#: the ``LLMPolicyConfig``; ``vllm`` registers in ``parpo.policy.llm.vllm_engine``).
ENGINES: NameRegistry[Callable[..., RolloutEngine]] = NameRegistry("rollout engine")


def cut(tokens: Sequence[int], logp: Sequence[float], stop_ids: frozenset[int], budget: int) -> Generation:
    """The generated row up to its first stop token (kept) and at most ``budget`` tokens."""
    n = min(budget, len(tokens))
    for j in range(n):
        if tokens[j] in stop_ids:
            n = j + 1
            break
    return Generation([int(t) for t in tokens[:n]], [float(x) for x in logp[:n]])


#: splitmix64's increment and multipliers (Steele et al. 2014): a counter-based stream per row.
_GOLDEN, _M1, _M2 = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of ``x`` [N] uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def row_seeds(generator: torch.Generator | None, n: int) -> list[int]:
    """Sampling seeds of ``n`` rows: one draw from ``generator`` (the global RNG without one)
    mixed with each row's index, so row i's tokens depend on the run's seed and i alone, never on
    which other rows share its batch."""
    base = int(torch.randint(2**62, (1,), generator=generator))
    return [int(x) for x in _mix(np.uint64(base) + np.arange(n, dtype=np.uint64))]


def row_uniforms(seeds: np.ndarray, step: int) -> np.ndarray:
    """[R] float64 in (0, 1): each row's uniform draw at decoding ``step`` (``seeds`` [R] uint64)."""
    bits = _mix(seeds ^ _mix(np.array([step], dtype=np.uint64)))
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


class RowSampler:
    """A logits processor that samples each row's next token itself, by inverting the CDF of
    ``softmax(scores / temperature)`` (scores as the processors before it left them, e.g.
    masked) at the row's own uniform (``row_uniforms``), and leaves only that token finite, so
    ``generate``'s greedy pick takes it. The sample depends on the row's seed and its scores, not
    on the batch. In float32 (a CDF over 49k tokens is then off by about 1e-5 relative, far below
    bf16's noise); it costs less than ``generate``'s own softmax and multinomial (about 73 vs 289
    ms a step for 128 rows x 49k tokens on one loaded CPU thread)."""

    def __init__(self, seeds: Sequence[int], temperature: float) -> None:
        self.seeds, self.temperature, self.step = np.array(seeds, dtype=np.uint64), temperature, 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        u = torch.from_numpy(row_uniforms(self.seeds, self.step)).to(scores.device)
        self.step += 1
        x = scores / self.temperature
        w = (x - x.amax(-1, keepdim=True)).exp_()  # [R, V] unnormalised probabilities
        cdf = torch.cumsum(w, -1, out=w)
        # the first token whose CDF reaches u * total (u > 0: never a zero-probability token)
        pick = torch.searchsorted(cdf, u.to(cdf.dtype).unsqueeze(1) * cdf[:, -1:]).clamp_(
            max=scores.shape[1] - 1
        )
        return torch.full_like(scores, float("-inf")).scatter_(1, pick, 0.0)


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
    ``generator`` seeds the sampling, row by row (``row_seeds``, ``RowSampler``)."""

    def __init__(self, model: Any, pad_id: int, stop_ids: Sequence[int],
                 constraint: ToolCallConstraint | None = None) -> None:  # fmt: skip
        self.model, self.pad_id, self.stop_ids = model, pad_id, frozenset(stop_ids)
        self.constraint = constraint

    def sync(self, model: Any) -> None:
        self.model = model  # the trainer's own module: nothing to copy

    def score(self, ids: Sequence[int]) -> dict[str, list[float]]:
        return {"engine hf": probe_logprobs(self.model, ids)}

    def generate(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], *, temperature: float,
                 greedy: bool, generator: torch.Generator | None = None) -> list[Generation]:  # fmt: skip
        seeds = row_seeds(generator, len(prompts))
        return self.generate_rows(prompts, budgets, seeds, temperature=temperature, greedy=greedy)

    @torch.no_grad()
    def generate_rows(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], seeds: Sequence[int], *,
                      temperature: float, greedy: bool) -> list[Generation]:  # fmt: skip
        """``generate`` with each row's sampling seed given (``row_seeds``; unused when greedy)."""
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
        # generate's own sampling is off: RowSampler (last) draws, and greedy picks its token
        kw: dict[str, Any] = {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
        processors: list[Any] = []
        masks = None
        if self.constraint is not None:
            masks = ConstraintMasks(self.constraint, [budgets[i] for i in todo], width)
            processors.append(masks)
        if not greedy:
            processors.append(RowSampler([seeds[i] for i in todo], temperature))
        if processors:
            from transformers import LogitsProcessorList

            kw["logits_processor"] = LogitsProcessorList(processors)
        res = self.model.generate(
            input_ids=ids.to(dev), attention_mask=attn.to(dev), max_new_tokens=max(budgets[i] for i in todo),
            pad_token_id=self.pad_id, eos_token_id=sorted(self.stop_ids), output_logits=True,
            return_dict_in_generate=True, **kw,
        )  # fmt: skip
        new = res.sequences[:, width:]
        logp = torch.empty(new.shape, dtype=torch.float32)
        for t, step in enumerate(res.logits):  # one [R, V] step at a time: no [R, S, V] copies
            step = step.float() / temperature
            if masks is not None:
                step = step.masked_fill(~masks.masks[t], float("-inf"))
            logp[:, t] = torch.log_softmax(step, -1).gather(-1, new[:, t : t + 1]).squeeze(-1).cpu()
        del res  # the per-step logits (output_logits): [R, V] each, S of them
        new, logp = new.cpu().tolist(), logp.tolist()
        for r, i in enumerate(todo):
            out[i] = cut(new[r], logp[r], self.stop_ids, budgets[i])
        return out


@torch.no_grad()
def probe_logprobs(model: Any, ids: Sequence[int]) -> list[float]:
    """[L - 1] log p(ids[j] | ids[:j]) for j >= 1 under ``model`` at temperature 1, in eval mode
    (the trainer's computation, ``logprobs.token_logprobs``)."""
    dev = next(model.parameters()).device
    x = torch.tensor([list(ids)], dtype=torch.int64, device=dev)
    training = model.training
    model.eval()
    try:
        logp, _ = token_logprobs(model, x, torch.ones_like(x), torch.ones_like(x, dtype=torch.bool), 1.0)
    finally:
        model.train(training)
    return logp[0, 1:].cpu().tolist()


@ENGINES.register("hf")
def _hf(model: Any, pad_id: int, stop_ids: Sequence[int], constraint: ToolCallConstraint | None = None,
        cfg: Any = None) -> RolloutEngine:  # fmt: skip
    return HFEngine(model, pad_id, stop_ids, constraint)
