"""A retrain's records, its lock and its crash points.

``REG/retrain/<key>/`` holds one JSON record per step, each written atomically when the step
is done (``read``, ``heldout``, ``reward``, ``eval``, ``gate``, ``promote``, ``outcome``).
``key`` digests the inputs (data fingerprint, base versions, window, replay, config overrides,
gate config), so the same inputs find the same folder: a finished run is answered from its
``outcome.json``; an unfinished one resumes after its last record. ``REG/retrain/.lock`` is
``flock``ed for the whole job: a second retrain waits (and says so).

``PARPO_RETRAIN_CRASH_AT=<point>`` SIGKILLs the process at that point (``crash_point``): how
the tests show that a retrain killed anywhere leaves the registry consistent.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from parpo_core.artefacts.jsonio import canonical_json
from parpo_core.artefacts.layout import utc_now
from parpo_core.durable import atomic_write_json

FOLDER = "retrain"
LOCK = ".lock"
CRASH_ENV = "PARPO_RETRAIN_CRASH_AT"
SCHEMA_VERSION = 1


def digest(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


def crash_point(name: str) -> None:
    """SIGKILL this process when ``PARPO_RETRAIN_CRASH_AT`` names ``name`` (tests only)."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def job_lock(root: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Hold ``root/.lock`` exclusively; when another retrain holds it, ``say`` so and wait."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text().strip() or "unknown"
            say(f"waiting for another retrain to finish (it holds {path}, pid {holder})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class Journal:
    """The records of one retrain (``REG/retrain/<key>/``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def key(self) -> str:
        return self.path.name

    def read(self, step: str) -> dict[str, Any] | None:
        p = self.path / f"{step}.json"
        return json.loads(p.read_text()) if p.is_file() else None

    def write(self, step: str, record: dict[str, Any]) -> dict[str, Any]:
        """Write ``<step>.json`` (atomically) and return what was written."""
        self.path.mkdir(parents=True, exist_ok=True)
        obj = {"schema_version": SCHEMA_VERSION, "step": step, "at": utc_now(), **record}
        atomic_write_json(self.path / f"{step}.json", obj)
        crash_point(f"after-{step}")
        return obj


def journals(root: Path) -> list[Journal]:
    """Every retrain folder under ``root``, oldest first (by the time of its ``read`` record)."""
    found = [Journal(p) for p in root.iterdir() if p.is_dir()] if root.is_dir() else []
    return sorted(found, key=lambda j: ((j.read("read") or {}).get("at", ""), j.key))


def published_by(reg, kind: str, key: str) -> str | None:
    """The version of ``kind`` trained on these inputs (its lineage's ``extra.retrain_key``), if any."""
    kdir = reg.kind_dir(kind)
    for name in reversed(reg.versions(kind)):
        try:
            extra = json.loads((kdir / name / "lineage.json").read_text()).get("extra") or {}
        except (OSError, ValueError):
            continue
        if extra.get("retrain_key") == key:
            return name
    return None
