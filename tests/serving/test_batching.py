"""Micro-batching: dispatch at once when idle, fill batches while the model is busy."""

from __future__ import annotations

import asyncio
import threading

from serving.batching import MicroBatcher
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
