"""Pointers (``latest.json``, ``production.json`` and named aliases such as ``staging.json``):
small JSON files replaced atomically.

```json
{"schema_version": 1, "kind": "reward", "pointer": "production",
 "version": "v000003-20261130T131500Z", "updated": "2026-11-30T13:15:02Z",
 "previous": ["v000001-20261129T090000Z"]}
```

``previous`` is a stack, newest first: moving a pointer pushes the version it
left; ``rollback`` pops. Callers hold the kind's lock while they read, modify
and write a pointer.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from parpo_core.artefacts.errors import RegistryError
from parpo_core.artefacts.layout import LOCK, RESERVED, check_alias, is_alias_name, utc_now
from parpo_core.durable import atomic_write_json, fsync_path

HISTORY = 100  # entries kept in ``previous``


@contextmanager
def kind_lock(kind_dir: Path) -> Iterator[None]:
    """Exclusive ``flock`` on ``<kind>/.lock``: serialises naming, renames and pointer moves
    across threads and processes on the machine (and on filesystems that honour flock)."""
    kind_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(kind_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def path(kind_dir: Path, pointer: str) -> Path:
    return kind_dir / f"{check_alias(pointer)}.json"


def names(kind_dir: Path) -> list[str]:
    """Every pointer set in ``kind_dir``: ``production``, ``latest``, then the others sorted."""
    found = {p.stem for p in kind_dir.glob("*.json") if is_alias_name(p.stem)} if kind_dir.is_dir() else set()
    return [p for p in RESERVED[::-1] if p in found] + sorted(found - set(RESERVED))


def remove(kind_dir: Path, kind: str, pointer: str) -> str:
    """Delete ``pointer`` (its history goes with it); returns the version it pointed at."""
    old = read(kind_dir, pointer)
    if old is None:
        raise RegistryError(f"{kind}: no alias {pointer!r} to remove")
    path(kind_dir, pointer).unlink()
    fsync_path(kind_dir)
    return old["version"]


def read(kind_dir: Path, pointer: str) -> dict[str, Any] | None:
    """The pointer's JSON, or None when it was never written."""
    p = path(kind_dir, pointer)
    if not p.exists():
        return None
    try:
        obj = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RegistryError(
            f"{p}: pointer is not valid JSON ({e}); rewrite it with `parpo registry promote`"
        ) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("version"), str):
        raise RegistryError(f"{p}: pointer has no 'version'; rewrite it with `parpo registry promote`")
    return obj


def move(kind_dir: Path, kind: str, pointer: str, version: str) -> dict[str, Any]:
    """Point ``pointer`` at ``version``, pushing the old target onto ``previous`` (no-op if equal)."""
    try:
        old = read(kind_dir, pointer)
    except RegistryError:  # an unreadable pointer is rewritten (its history is lost)
        old = None
    if old is not None and old["version"] == version:
        return old
    previous = [] if old is None else [old["version"], *old.get("previous", [])]
    return _write(kind_dir, kind, pointer, version, previous)


def pop(kind_dir: Path, kind: str, pointer: str) -> dict[str, Any]:
    """Point ``pointer`` back at the version it pointed to before (``previous[0]``)."""
    old = read(kind_dir, pointer)
    if old is None:
        raise RegistryError(f"{kind}: no {pointer} version yet, nothing to roll back")
    if not old.get("previous"):
        raise RegistryError(
            f"{kind}: {pointer} {old['version']} has no previous {pointer} version to roll back to"
        )
    return _write(kind_dir, kind, pointer, old["previous"][0], list(old["previous"][1:]))


def _write(kind_dir: Path, kind: str, pointer: str, version: str, previous: list[str]) -> dict[str, Any]:
    obj = {
        "schema_version": 1,
        "kind": kind,
        "pointer": pointer,
        "version": version,
        "updated": utc_now(),
        "previous": previous[:HISTORY],
    }
    atomic_write_json(path(kind_dir, pointer), obj)
    return obj
