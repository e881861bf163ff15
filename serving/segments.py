"""Append-only JSON-lines segments with group commit: the storage of decisions and events.

A log is a folder of segments ``<UTC time>-<pid>-<writer>-<n>.jsonl``; a writer only ever appends
to a segment it created, so a restarted server (or a replica sharing the folder) never touches
another's file. One line is one record (a JSON object). ``append(records)`` queues a unit of
records; units are collected for ``commit_interval_ms``, written with unbuffered writes and
made durable with one ``fsync`` (group commit). The future ``append`` returns resolves after
that fsync, so a caller that acknowledges durability awaits it and one that does not (the
decision log under ``on_failure: serve``) does not.

The invariant: a unit is stored whole or not at all, and a future that failed never has its
records appear later. On a failed write or fsync (a full disk, a read-only remount, an I/O
error) every future of the commit fails and the segment is truncated back to its last good
offset (there is no user-space buffer to flush the failed bytes later); should the truncate
fail too, the segment is abandoned and the next commit starts a new one. The writer thread
never dies on an ``OSError``: it marks the log unhealthy (``healthy``, ``last_error``; the
server's ``/readyz`` answers 503) and, while idle, probes the folder every ``probe_s`` seconds
(write, fsync and remove a scratch file) until the disk takes writes again.

A crash can leave a torn last line in the newest segment: its records were never
acknowledged, and readers skip it (``read_records``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from parpo_core.durable import fsync_path

log = logging.getLogger("parpo.serve")
SUFFIX = ".jsonl"
PROBE_BYTES = 4096
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


def encode(records: Sequence[dict[str, Any]]) -> bytes:
    """``records`` as JSON lines (NaN and infinities refused: they are not JSON)."""
    return b"".join((json.dumps(r, separators=(",", ":"), allow_nan=False) + "\n").encode() for r in records)


class SegmentLog:
    """One writer thread per log; ``append`` is called from the event loop.

    ``on_failure(n, error)`` is called on the writer thread for every failed commit of ``n``
    records (the server counts them in ``parpo_log_write_failures_total``).
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        commit_interval_ms: float,
        segment_bytes: int,
        probe_s: float = 1.0,
        on_failure: Callable[[int, OSError], None] | None = None,
    ) -> None:
        self.folder = Path(
            folder
        )  # made by the first probe: a folder that cannot be made is reported, not fatal
        self.interval = commit_interval_ms / 1000
        self.segment_bytes = segment_bytes
        self.probe_s = probe_s
        self.on_failure = on_failure
        self.commits = 0  # fsyncs done (group commits)
        self.records = 0  # records stored
        self.failed = 0  # records whose commit failed
        self.healthy = True
        self.last_error: str | None = None
        self._n = 0
        self._writer = secrets.token_hex(4)  # two writers in one process and second never share a name
        self._fd: int | None = None
        self._size = 0  # bytes of the open segment known durable
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"log-{self.folder.name}", daemon=True)
        self._thread.start()

    def append(self, records: Sequence[dict[str, Any]]) -> asyncio.Future[None]:
        """Queue ``records`` as one unit; the future resolves once they are all on disk (after
        fsync), or fails with the ``OSError`` that kept every one of them off it."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._queue.put((encode(records), len(records), loop, fut))
        return fut

    def close(self) -> None:
        """Write and fsync everything queued, then stop the writer (blocking)."""
        self._queue.put(_STOP)
        self._thread.join()

    # -- writer thread -------------------------------------------------------------------
    def _open(self) -> None:
        self._abandon()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._n += 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        path = self.folder / f"{stamp}-{os.getpid()}-{self._writer}-{self._n:04d}{SUFFIX}"
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = 0
        fsync_path(self.folder)  # the new name survives a crash too

    def _abandon(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):  # nothing of it is relied on any more
                os.close(fd)

    def _write(self, data: bytes) -> None:
        if self._fd is None or self._size >= self.segment_bytes:
            self._open()
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)
        self._size += len(data)

    def _rollback(self) -> None:
        """Cut the segment back to its last good offset, so failed bytes never surface later."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, self._size)
            os.fsync(self._fd)
        except OSError as e:
            log.error("%s: could not truncate a failed write (%s); starting a new segment", self.folder, e)
            self._abandon()

    def _probe(self) -> None:
        """At start, and while unhealthy: can the folder take a write and an fsync?"""
        scratch = self.folder / f".probe-{os.getpid()}-{self._writer}"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, b"\0" * PROBE_BYTES)
                os.fsync(fd)
            finally:
                os.close(fd)
                scratch.unlink(missing_ok=True)
        except OSError as e:
            if self.healthy:
                log.error("%s: cannot be written (%s)", self.folder, e)
            self.healthy, self.last_error = False, f"{e.__class__.__name__}: {e}"
            return
        if not self.healthy:
            log.info("%s: writes work again", self.folder)
        self.healthy, self.last_error = True, None

    def _commit(self, batch: list[tuple[bytes, int, Any, Any]]) -> None:
        data = b"".join(unit for unit, _, _, _ in batch)
        n = sum(count for _, count, _, _ in batch)
        error: OSError | None = None
        try:
            self._write(data)
        except OSError as e:  # disk full, read-only, I/O error: every caller of this commit fails
            error = e
            self._rollback()
            self.failed += n
            if self.healthy:
                log.error("%s: write failed (%s); answering 503 until it works again", self.folder, e)
            self.healthy, self.last_error = False, f"{e.__class__.__name__}: {e}"
            if self.on_failure is not None:
                self.on_failure(n, e)
        else:
            self.healthy, self.last_error = True, None
            self.commits += 1
            self.records += n
        for _, _, loop, fut in batch:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_settle, fut, error)

    def _run(self) -> None:
        self._probe()
        stop = False
        while not stop:
            try:
                first = self._queue.get(timeout=None if self.healthy else self.probe_s)
            except queue.Empty:
                self._probe()
                continue
            batch = [first]
            if first is not _STOP and self.interval:
                time.sleep(self.interval)  # let concurrent appends join this commit
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if any(b is _STOP for b in batch):
                stop = True
                batch = [b for b in batch if b is not _STOP]
            if batch:
                self._commit(batch)
        self._abandon()


def _settle(fut: asyncio.Future[None], error: BaseException | None) -> None:
    if fut.done():
        return
    if error is None:
        fut.set_result(None)
    else:
        fut.set_exception(error)
