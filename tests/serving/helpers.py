"""Starting the app under TestClient and waiting for its first model (no network, no sleeps
beyond polling readiness)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from serving.app import create_app
from serving.config import ServeConfig


def client(registry: Path, events: Path, *, policy: str = "production", cfg: ServeConfig | None = None,
           **kw: Any) -> TestClient:  # fmt: skip
    return TestClient(create_app(registry, policy=policy, events=events, cfg=cfg or small_config(), **kw))


def small_config(**updates: Any) -> ServeConfig:
    data: dict[str, Any] = {"exploration": {"samples": 16}, "log": {"commit_interval_ms": 1.0}, "poll_s": 0}
    data.update(updates)
    return ServeConfig.model_validate(data)


def wait_ready(c: TestClient, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while c.get("/readyz").status_code != 200:
        assert time.monotonic() < end, "server never became ready"
        time.sleep(0.02)


class FaultyDisk:
    """Injected disk faults for the files under ``folder``: while ``error`` is set (an errno such
    as ``ENOSPC`` or ``EROFS``), opening, writing and fsyncing there fail with it; with
    ``partial`` a write first puts half its bytes on disk (a disk filling up mid-write). Other
    files and sockets are untouched. For machines where a small or read-only mount cannot be
    made; ``install(monkeypatch)`` patches ``os`` as the segment writer sees it."""

    def __init__(self, folder: Path) -> None:
        self.folder = str(folder.resolve())
        self.error: int | None = None
        self.partial = False
        self.failures = 0

    def _ours(self, fd_or_path: int | str | Path) -> bool:
        path = os.readlink(f"/proc/self/fd/{fd_or_path}") if isinstance(fd_or_path, int) else str(fd_or_path)
        return self.error is not None and os.path.abspath(path).startswith(self.folder)

    def _fail(self) -> OSError:
        self.failures += 1
        assert self.error is not None
        return OSError(self.error, os.strerror(self.error))

    def install(self, monkeypatch: Any) -> FaultyDisk:
        real_open, real_write, real_fsync = os.open, os.write, os.fsync

        def open_(path: Any, flags: int, *a: Any, **kw: Any) -> int:
            if flags & (os.O_WRONLY | os.O_RDWR) and self._ours(path):
                raise self._fail()
            return real_open(path, flags, *a, **kw)

        def write(fd: int, data: Any) -> int:
            if self._ours(fd):
                if self.partial and len(data) > 1:
                    real_write(fd, bytes(data[: len(data) // 2]))
                raise self._fail()
            return real_write(fd, data)

        def fsync(fd: int) -> None:
            if self._ours(fd):
                raise self._fail()
            real_fsync(fd)

        monkeypatch.setattr("serving.segments.os.open", open_)
        monkeypatch.setattr("serving.segments.os.write", write)
        monkeypatch.setattr("serving.segments.os.fsync", fsync)
        return self
