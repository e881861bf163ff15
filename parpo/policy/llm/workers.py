"""Ray rollout workers (``rollout.workers: N``, extra ``ray``): N actors, each owning an ``hf``
engine on its own copy of the model, behind the ``RolloutEngine`` interface.

Each engine call splits the running episodes' prompts into N contiguous shares, one per worker,
generated at once; the environment, the episodes and the trainer stay in the trainer's process.
Row i's sampling seed is drawn as the in-process engine draws it (``engine.row_seeds``: the
run's generator and i), so the workers sample the same tokens as one process would for the same
seed. Their log-probs agree to float error (a share is padded and batched apart from the rest;
the tests see at most 1e-5 in fp32), and in rare cases that error could flip a sample whose
uniform draw falls on a boundary of its CDF.

A worker loads the model from ``policy.model`` (adding LoRA adapters of the same config); after
each update ``sync`` puts the new weights once in Ray's object store (LoRA: the adapters only)
and every worker loads them, within ``rollout.sync_timeout_s``; ``parpo.policy.llm.sync`` then
checks each worker's log-probs of the probe sequence. A timeout or a dead worker is one line
naming the worker.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from parpo.policy.llm import model as lm
from parpo.policy.llm.config import LLMTrainConfig, LoraConfig
from parpo.policy.llm.constrain import ToolCallConstraint
from parpo.policy.llm.engine import Generation, HFEngine, row_seeds
from parpo.policy.llm.sync import EngineSyncError, sync_engine
from parpo_core.errors import UserError

if TYPE_CHECKING:
    from parpo.policy.llm.policy import LLMPolicy


def require_ray() -> Any:
    """The ``ray`` module, or one line naming the extra."""
    try:
        import ray
    except ImportError:
        raise UserError("rollout.workers > 0 needs the ray extra: pip install 'parpo[ray]' "
                        "(or set rollout.workers: 0)") from None  # fmt: skip
    return ray


@dataclass
class WorkerSpec:
    """What a worker builds its engine from: the model folder and dtype, LoRA (None: full
    weights), the turn's pad and stop ids, the decoding constraint and its torch threads."""

    model: str
    dtype: str
    lora: LoraConfig | None
    pad_id: int
    stop_ids: list[int]
    constraint: ToolCallConstraint | None
    threads: int


def sync_weights(model: Any) -> dict[str, torch.Tensor]:
    """What a sync sends: a LoRA model's adapter tensors (``lora_`` in the name), else the whole
    state dict; detached, on CPU."""
    state = model.state_dict()
    if lm.is_lora(model):
        state = {k: v for k, v in state.items() if "lora_" in k}
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


class RolloutWorker:
    """One Ray actor's state: an ``HFEngine`` on its own model (``ray.remote`` is applied at start)."""

    def __init__(self, spec: WorkerSpec) -> None:
        torch.set_num_threads(spec.threads)
        model = lm.load_model(spec.model, spec.dtype)
        if spec.lora is not None:
            model = lm.add_lora(model, spec.lora)
        model.eval()
        self.engine = HFEngine(model, spec.pad_id, spec.stop_ids, spec.constraint)

    def load(self, state: dict[str, torch.Tensor]) -> int:
        """Copies ``state`` into the model (every tensor must name one of its own); returns the
        number of tensors loaded."""
        _, unexpected = self.engine.model.load_state_dict(state, strict=False)
        if unexpected:
            raise ValueError(f"weights the worker's model does not have: {', '.join(unexpected[:3])}")
        return len(state)

    def generate(self, prompts: list[list[int]], budgets: list[int], seeds: list[int], temperature: float,
                 greedy: bool) -> list[Generation]:  # fmt: skip
        return self.engine.generate_rows(prompts, budgets, seeds, temperature=temperature, greedy=greedy)

    def score(self, ids: list[int]) -> list[float]:
        return self.engine.score(ids)["engine hf"]

    def pid(self) -> int:
        return os.getpid()


class RayEngine:
    """The ``RolloutEngine`` over Ray workers (``start_workers`` builds it)."""

    def __init__(self, ray: Any, workers: Sequence[Any], timeout_s: float, owns_ray: bool) -> None:
        self.ray, self.workers, self.timeout_s, self.owns_ray = ray, list(workers), timeout_s, owns_ray

    def _get(self, refs: Sequence[Any], what: str, timeout: float | None) -> list[Any]:
        """Each worker's answer (refs[k] from worker k), or one line naming the first worker that
        gave none within ``timeout`` s, died, or raised."""
        ray = self.ray
        if not refs:  # no row had a budget left
            return []
        _, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        late = [k for k, r in enumerate(refs) if r in pending]
        if late:
            raise EngineSyncError(f"rollout worker {late[0]}: no answer to the {what} within {timeout:g} s "
                                  "(rollout.sync_timeout_s)")  # fmt: skip
        out = []
        for k, r in enumerate(refs):
            try:
                out.append(ray.get(r))
            except ray.exceptions.RayActorError:
                raise EngineSyncError(f"rollout worker {k} died (during the {what})") from None
            except ray.exceptions.RayTaskError as e:
                cause = str(e.cause if getattr(e, "cause", None) is not None else e).strip().splitlines()
                raise EngineSyncError(
                    f"rollout worker {k} failed the {what}: {cause[-1] if cause else e}"
                ) from None
        return out

    def generate(self, prompts: Sequence[Sequence[int]], budgets: Sequence[int], *, temperature: float,
                 greedy: bool, generator: torch.Generator | None = None) -> list[Generation]:  # fmt: skip
        seeds = row_seeds(generator, len(prompts))
        out = [Generation([], []) for _ in prompts]
        todo = np.array([i for i, b in enumerate(budgets) if b > 0], dtype=np.int64)
        shares = [s.tolist() for s in np.array_split(todo, len(self.workers)) if len(s)]
        refs = []
        for w, s in zip(self.workers, shares, strict=False):
            rows = [list(prompts[i]) for i in s], [int(budgets[i]) for i in s], [seeds[i] for i in s]
            refs.append(w.generate.remote(*rows, temperature, greedy))
        for s, gens in zip(shares, self._get(refs, "generation", None), strict=True):
            for i, g in zip(s, gens, strict=True):
                out[i] = g
        return out

    def sync(self, model: Any) -> None:
        state = self.ray.put(sync_weights(model))  # once in the object store, read by every worker
        self._get([w.load.remote(state) for w in self.workers], "weight sync", self.timeout_s)

    def score(self, ids: Sequence[int]) -> dict[str, list[float]]:
        got = self._get([w.score.remote(list(ids)) for w in self.workers], "probe", self.timeout_s)
        return {f"rollout worker {k}": logp for k, logp in enumerate(got)}

    def close(self) -> None:
        """Stops the workers (and the local Ray this engine started)."""
        for w in self.workers:
            self.ray.kill(w)
        self.workers = []
        if self.owns_ray:
            self.ray.shutdown()


def start_workers(policy: LLMPolicy, cfg: LLMTrainConfig) -> RayEngine:
    """``cfg.rollout.workers`` workers on ``policy``'s model (a local Ray unless
    ``rollout.ray_address``), synced to its current weights and checked on the probe."""
    ray = require_ray()
    r = cfg.rollout
    owns = not ray.is_initialized()
    if owns:  # enough CPUs for every worker even where that oversubscribes the machine
        cpus = None if r.ray_address else max(os.cpu_count() or 1, r.workers * r.worker_threads)
        ray.init(address=r.ray_address, num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    spec = WorkerSpec(
        model=cfg.policy.model, dtype=cfg.policy.dtype, lora=cfg.policy.lora if cfg.policy.lora.r > 0 else None,
        pad_id=policy.pad_id, stop_ids=sorted(policy.chat.stop_ids), constraint=policy.constraint,
        threads=r.worker_threads,
    )  # fmt: skip
    actor = ray.remote(num_cpus=r.worker_threads)(RolloutWorker)
    engine = RayEngine(ray, [actor.remote(spec) for _ in range(r.workers)], r.sync_timeout_s, owns)
    sync_engine(engine, policy.model, policy.chat, r.probe_tolerance)
    return engine
