"""Append-only JSON-lines segments with group commit: the storage of decisions and events.

A log is a folder of segments ``<UTC time>-<pid>-<writer>-<n>.jsonl``; a writer only ever appends
to a segment it created, so a restarted server (or a replica sharing the folder) never touches
another's file. One line is one record (a JSON object). Records are collected for
``commit_interval_ms``, written with one ``write`` and made durable with one ``fsync``
(group commit); ``append`` returns a future that resolves after that fsync, so a caller that
acknowledges durability awaits it and one that does not (the decision log) does not.

A crash can leave a torn last line in the newest segment: its records were never
acknowledged, and readers skip it (``read_records``).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from parpo_core.durable import fsync_path

SUFFIX = ".jsonl"
_STOP = object()


def read_records(folder: str | Path) -> Iterator[dict[str, Any]]:
    """Every record of every segment of ``folder``, segments in name (time) order."""
    for seg in sorted(Path(folder).glob(f"*{SUFFIX}")):
        with seg.open("rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break  # torn tail of a crash: never acknowledged
                try:
                    yield json.loads(line)
                except ValueError:
                    continue


class SegmentLog:
    """One writer thread per log; ``append`` is called from the event loop."""

    def __init__(self, folder: str | Path, *, commit_interval_ms: float, segment_bytes: int) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.interval = commit_interval_ms / 1000
        self.segment_bytes = segment_bytes
        self.commits = 0  # fsyncs done (group commits)
        self.records = 0
        self._n = 0
        self._writer = secrets.token_hex(4)  # two writers in one process and second never share a name
        self._file: Any = None
        self._size = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"log-{self.folder.name}", daemon=True)
        self._thread.start()

    def append(self, record: dict[str, Any]) -> asyncio.Future[None]:
        """Queue ``record``; the future resolves once it is on disk (after fsync)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
        self._queue.put((line, loop, fut))
        return fut

    def close(self) -> None:
        """Write and fsync everything queued, then stop the writer (blocking)."""
        self._queue.put(_STOP)
        self._thread.join()

    # -- writer thread -------------------------------------------------------------------
    def _open(self) -> None:
        if self._file is not None:
            self._file.close()
        self._n += 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = self.folder / f"{stamp}-{os.getpid()}-{self._writer}-{self._n:04d}{SUFFIX}"
        self._file = open(path, "ab")  # noqa: SIM115  (kept open across commits)
        self._size = 0
        fsync_path(self.folder)  # the new name survives a crash too

    def _run(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            if batch[0] is not _STOP and self.interval:
                time.sleep(self.interval)  # let concurrent appends join this commit
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if any(b is _STOP for b in batch):
                stop = True
                batch = [b for b in batch if b is not _STOP]
            if not batch:
                continue
            if self._file is None or self._size >= self.segment_bytes:
                self._open()
            data = b"".join(line for line, _, _ in batch)
            try:
                self._file.write(data)
                self._file.flush()
                os.fsync(self._file.fileno())
                error: BaseException | None = None
            except OSError as e:  # disk full, I/O error: the callers answer 503
                error = e
            self._size += len(data)
            self.commits += 1
            self.records += len(batch)
            for _, loop, fut in batch:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(_settle, fut, error)
        if self._file is not None:
            self._file.close()


def _settle(fut: asyncio.Future[None], error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)
