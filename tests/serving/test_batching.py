"""Micro-batching: dispatch at once when idle, fill batches while the model is busy."""

from __future__ import annotations

import asyncio
import threading

from serving.batching import MicroBatcher, ModelError, isolate
from serving.metrics import Metrics


def test_idle_dispatches_at_once_and_busy_batches_fill_up_to_max():
    calls: list[list[int]] = []
    release = threading.Event()

    def fn(jobs: list[int]) -> list[int]:
        calls.append(list(jobs))
        if jobs == [0]:
            release.wait(30)  # the model is busy with the first request
        return [j * 10 for j in jobs]

    async def main() -> list[int]:
        # A max wait of a minute: had an idle dispatch waited for it, this test would hang.
        b: MicroBatcher[int, int] = MicroBatcher(fn, max_batch=3, max_wait_ms=60_000, metrics=Metrics())
        b.start()
        first = asyncio.create_task(b.submit(0))
        while not calls:
            await asyncio.sleep(0.001)
        rest = [asyncio.create_task(b.submit(i)) for i in range(1, 7)]  # two full batches
        await asyncio.sleep(0.01)  # let them queue behind the busy model
        release.set()
        out = await asyncio.gather(first, *rest)
        await b.stop()
        return out

    out = asyncio.run(main())
    assert out == [i * 10 for i in range(7)]
    assert calls == [[0], [1, 2, 3], [4, 5, 6]]


def test_max_batch_one_is_no_batching():
    calls: list[list[int]] = []

    async def main() -> None:
        b: MicroBatcher[int, int] = MicroBatcher(lambda j: (calls.append(list(j)), j)[1], max_batch=1,
                                                 max_wait_ms=5, metrics=Metrics())  # fmt: skip
        b.start()
        await asyncio.gather(*(b.submit(i) for i in range(4)))
        await b.stop()

    asyncio.run(main())
    assert calls == [[0], [1], [2], [3]]


def test_a_failing_job_fails_alone_and_its_batch_is_served():
    """One job the model cannot answer (issue 15, point 1): its caller gets a ModelError, every
    other caller of the same batch its result; the split costs O(log n) extra calls."""
    calls: list[list[int]] = []

    def fn(jobs: list[int]) -> list[int]:
        calls.append(list(jobs))
        if 13 in jobs:
            raise ValueError("NaN in the batch")
        return [j * 10 for j in jobs]

    assert isolate(fn, list(range(32)))[13][0] is None
    assert len(calls) == 1 + 2 * 5  # the whole batch, then two halves per level down to 13 alone
    calls.clear()

    async def main() -> list[object]:
        release = threading.Event()

        def slow(jobs: list[int]) -> list[int]:
            if jobs == [-1]:
                release.wait(30)  # hold the model so that the next 32 queue into one batch
                return [0]
            return fn(jobs)

        b: MicroBatcher[int, int] = MicroBatcher(slow, max_batch=32, max_wait_ms=60_000, metrics=Metrics())
        b.start()
        first = asyncio.create_task(b.submit(-1))
        await asyncio.sleep(0.01)
        rest = [asyncio.create_task(b.submit(i)) for i in range(32)]
        await asyncio.sleep(0.01)
        release.set()
        out = await asyncio.gather(first, *rest, return_exceptions=True)
        await b.stop()
        return out[1:]

    out = asyncio.run(main())
    assert calls[0] == list(range(32))  # they did share one batch
    assert isinstance(out[13], ModelError) and "NaN in the batch" in str(out[13])
    assert [o for i, o in enumerate(out) if i != 13] == [i * 10 for i in range(32) if i != 13]
