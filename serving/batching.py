"""Micro-batching of model calls: requests queue up, one model call answers up to ``max_batch``.

The model runs on one worker thread, so the event loop keeps accepting requests while it
works. The dispatcher takes the first queued request and everything else already queued (up
to ``max_batch``); when it came back to an empty queue (idle server) it dispatches at once, and
only while requests are arriving faster than they are served does it wait up to
``max_wait_ms`` for the batch to fill. A request whose caller gave up (deadline) before its
batch left is skipped.

A failing batch is split in halves and each half retried (``isolate``), so one request the
model cannot answer fails alone, with its own error, and the rest of its batch is served.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from serving.metrics import Metrics

J = TypeVar("J")
R = TypeVar("R")


@dataclass
class _Item(Generic[J]):
    job: J
    fut: asyncio.Future[Any]
    queued: float


class MicroBatcher(Generic[J, R]):
    """``await submit(job)``; ``fn(jobs) -> results`` runs on the model thread, one batch at a time."""

    def __init__(
        self, fn: Callable[[Sequence[J]], list[R]], *, max_batch: int, max_wait_ms: float, metrics: Metrics
    ) -> None:
        self.fn, self.max_batch, self.max_wait = fn, max_batch, max_wait_ms / 1000
        self.metrics = metrics
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self._queue: asyncio.Queue[_Item[J]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Answer what is queued, then stop (the drain of a graceful shutdown)."""
        while not self._queue.empty():
            await asyncio.sleep(0.001)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.executor.shutdown(wait=True)

    async def submit(self, job: J) -> R:
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Item(job, fut, time.perf_counter()))
        return await fut

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        idle = True
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.max_batch:
                if not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                    continue
                if idle or self.max_wait == 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), self.max_wait))
                except TimeoutError:
                    break
            live = [b for b in batch if not b.fut.done()]  # callers past their deadline are gone
            if not live:
                continue
            start = time.perf_counter()
            for b in live:
                self.metrics.queue_wait.observe(start - b.queued)
            self.metrics.batch_size.observe(len(live))
            outcomes = await loop.run_in_executor(self.executor, isolate, self.fn, [b.job for b in live])
            for b, (r, err) in zip(live, outcomes, strict=True):
                if not b.fut.done():
                    if err is None:
                        b.fut.set_result(r)
                    else:
                        b.fut.set_exception(ModelError(f"{err.__class__.__name__}: {err}"))
            self.metrics.model_latency.observe(time.perf_counter() - start)
            idle = self._queue.empty()


def isolate(
    fn: Callable[[Sequence[J]], list[R]], jobs: Sequence[J]
) -> list[tuple[R | None, Exception | None]]:
    """``fn(jobs)`` as (result, None) per job; when it raises, each half is retried, down to the
    single jobs that fail alone: (None, their error). One bad job among n costs ~2 log2(n) calls."""
    try:
        return [(r, None) for r in fn(jobs)]
    except Exception as e:  # noqa: BLE001  (a model failure is its caller's 503, never a crash)
        if len(jobs) == 1:
            return [(None, e)]
    mid = len(jobs) // 2
    return isolate(fn, jobs[:mid]) + isolate(fn, jobs[mid:])


class ModelError(RuntimeError):
    """The model call failed; the API answers 503 with this reason."""
