"""Where an update's rollouts come from: ``SyncRollouts`` (collected at the start of the update)
or ``RolloutQueue``, the ``single_rollout`` order's, collected in a background thread while the
trainer updates (SAO's overlap of rollouts and updates). Both have ``next(update) -> Batch``,
``publish(version, module)`` (the weights after an update), ``checkpoint_state(state)`` and
``close()``. They serve both trainers: a ``Collect`` function knows the backend (the native
policy's ``parpo.trainer.rollout.collect``, the LLM's ``parpo.policy.llm.rollout.collect``).

Batch ``b`` (the rollouts update ``b`` trains on) is collected with the policy weights of version
``max(0, b - lag)`` (version ``v`` = the weights after ``v`` updates), so its staleness is
``min(b, lag)`` updates: bounded by ``lag`` and logged. The thread acts with a replica of the
policy (its own copy of the weights, ``load``-ed with each version it needs) and waits for that
version to be published, so it never runs more than ``lag + 1`` batches ahead, and every batch
depends only on its version's weights and the task and sampling generators, never on thread
timing: a run is reproducible, and ``lag = 0`` is the synchronous loop exactly.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from parpo.env.tasks import Task

#: ``collect(tasks) -> (rollouts, episodes)``: one batch's rollouts of ``tasks`` with the weights
#: its policy holds, and the environment's episodes of them (task and calls; the memory's input).
Collect = Callable[[Sequence[Task]], tuple[Any, list[Any]]]


@dataclass
class Batch:
    index: int  # the update it is for
    version: int  # the weights it was collected with
    roll: Any  # the backend's rollouts (``Rollouts``, or the LLM's ``Episodes``)
    collect_s: float  # seconds the thread spent collecting it
    wait_s: float  # seconds the trainer waited for it
    episodes: list[Any]  # the environment's episodes of ``roll`` (task and calls; the memory's input)


class SyncRollouts:
    """The batch of update ``u`` collected when the trainer asks for it, with the current weights."""

    def __init__(self, collect: Collect, draw: Callable[[], Sequence[Task]]) -> None:
        self._collect, self._draw = collect, draw

    def next(self, index: int) -> Batch:
        t0 = time.perf_counter()
        roll, episodes = self._collect(self._draw())
        return Batch(index, index, roll, time.perf_counter() - t0, 0.0, episodes)

    def publish(self, version: int, module: Any) -> None:
        pass

    def checkpoint_state(self, state: dict[str, Any]) -> dict[str, Any]:
        return state

    def close(self) -> None:
        pass


class RolloutQueue:
    """``next(b)`` returns batches ``first, first + 1, ... last - 1`` in order; ``publish(v, module)``
    hands the thread the weights of version ``v`` (a copy); ``close()`` stops it. ``collect`` acts
    with the thread's replica of the policy and ``load(weights)`` loads a version's state dict into
    it; ``draw()`` picks one batch's tasks (the caller's seeded task generator ``task_rng``);
    ``generator``: the sampling generator ``collect`` draws from. All three are called in the
    thread only."""

    def __init__(
        self,
        collect: Collect,
        load: Callable[[dict[str, Tensor]], Any],
        draw: Callable[[], Sequence[Task]],
        generator: torch.Generator,
        *,
        lag: int,
        first: int,
        last: int,
        task_rng: np.random.Generator,
    ) -> None:
        self._collect, self._load, self._draw, self._gen = collect, load, draw, generator
        self._lag, self._first, self._last, self._task_rng = lag, first, last, task_rng
        self._versions: dict[int, dict[str, Tensor]] = {}
        self._ready: dict[int, Batch | BaseException] = {}
        self._rng: dict[int, tuple[str, Tensor]] = {}  # batch -> generator states before it
        # A new thread starts with the default intra-op thread count; the caller's keeps the
        # summation order (and so the numbers) the synchronous loop would have.
        self._threads = torch.get_num_threads()
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="rollout-queue", daemon=True)
        self._thread.start()

    def publish(self, version: int, module: Any) -> None:
        state = _plain(module).state_dict()
        with self._cond:
            self._versions[version] = {k: v.detach().clone() for k, v in state.items()}
            self._cond.notify_all()

    def next(self, index: int) -> Batch:
        t0 = time.perf_counter()
        with self._cond:
            self._cond.wait_for(lambda: index in self._ready)
            item = self._ready.pop(index)
            # versions no later batch needs (batch b needs max(0, b - lag))
            for v in [v for v in self._versions if v < max(0, index + 1 - self._lag)]:
                del self._versions[v]
        if isinstance(item, BaseException):
            raise item
        item.wait_s = time.perf_counter() - t0
        return item

    def checkpoint_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` with the task and sampling generators as they were before the next batch
        (``state["update"]``) was collected: the thread has moved them on since. A run resumed
        from it draws the same tasks and samples; the batches that were in flight are collected
        again with the resumed weights (their staleness restarts at 0)."""
        task_json, gen_state = self._rng_before(state["update"])
        task_rng = np.random.default_rng()
        task_rng.bit_generator.state = json.loads(task_json)
        gen = torch.Generator(device=self._gen.device)
        gen.set_state(gen_state)
        return {**state, "task_rng": task_rng, "sample_gen": gen}

    def _rng_before(self, index: int) -> tuple[str, Tensor]:
        with self._cond:
            self._cond.wait_for(lambda: index in self._rng or index >= self._last)
            for b in [b for b in self._rng if b < index]:
                del self._rng[b]
            if index in self._rng:
                return self._rng[index]
        return _rng_state(self._task_rng, self._gen)  # every batch is collected: the thread is done

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join()

    # -- the thread ---------------------------------------------------------------------
    def _run(self) -> None:
        torch.set_num_threads(self._threads)
        for b in range(self._first, self._last):
            version = max(self._first, b - self._lag)
            with self._cond:
                self._cond.wait_for(lambda v=version: self._stop or v in self._versions)  # type: ignore[misc]
                if self._stop:
                    return
                weights = self._versions[version]
                self._rng[b] = _rng_state(self._task_rng, self._gen)
                self._cond.notify_all()
            try:
                t0 = time.perf_counter()
                self._load(weights)
                roll, episodes = self._collect(self._draw())
                item: Batch | BaseException = Batch(b, version, roll, time.perf_counter() - t0, 0.0, episodes)
            except BaseException as e:  # re-raised by next() in the trainer's thread
                item = e
            with self._cond:
                self._ready[b] = item
                self._cond.notify_all()
            if isinstance(item, BaseException):
                return


def _rng_state(task_rng: np.random.Generator, gen: torch.Generator) -> tuple[str, Tensor]:
    return json.dumps(task_rng.bit_generator.state), gen.get_state()


def _plain(module: Any) -> Any:
    return getattr(module, "module", module)
