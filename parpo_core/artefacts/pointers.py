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

A pointer file that exists but cannot be used (not JSON, no ``version``, a
folder, ...) is ``Broken``: reading it is a one-line error saying how to fix
it, and moving it rewrites it (its history is lost) and reports what it held.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parpo_core.artefacts.errors import RegistryError
from parpo_core.artefacts.layout import LOCK, RESERVED, check_alias, is_alias_name, utc_now
from parpo_core.durable import atomic_write_json, fsync_path

HISTORY = 100  # entries kept in ``previous``
MAX_BYTES = 1 << 20  # a pointer is a few KiB (HISTORY names); a larger file is not one
HEAD = 40  # bytes of a broken pointer quoted in messages


@dataclass(frozen=True)
class Broken:
    """A pointer file that exists but is not a pointer: why, and its first bytes."""

    path: Path
    reason: str  # e.g. "not valid JSON at byte 1"
    head: bytes  # at most HEAD bytes from the start of the file
    size: int  # bytes in the file (0 when it could not be read)

    def quote(self) -> str:
        """The first bytes as a Python bytes literal, ``...`` when the file is longer."""
        return repr(self.head) + ("..." if self.size > len(self.head) else "")

    def problem(self) -> str:
        """``not valid JSON at byte 1, first bytes b'{oops'``"""
        return f"{self.reason}, first bytes {self.quote()}" if self.size else self.reason


@dataclass(frozen=True)
class Moved:
    """What a pointer move did (``move``, ``pop``)."""

    pointer: str
    version: str  # the version the pointer names now
    before: str | None  # the version it named before; None when unset or broken
    repaired: Broken | None = None  # the broken file this move replaced

    @property
    def changed(self) -> bool:
        return self.version != self.before


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


def load(kind_dir: Path, pointer: str) -> dict[str, Any] | Broken | None:
    """The pointer's JSON, ``Broken`` when its file is not a pointer, None when it was never written."""
    p = path(kind_dir, pointer)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return Broken(p, "a folder, not a file", b"", 0)
    except OSError as e:
        return Broken(p, f"unreadable ({e.strerror or e.__class__.__name__})", b"", 0)
    size = p.stat().st_size if len(raw) > MAX_BYTES else len(raw)
    broken = _problem(raw, size)
    if broken is not None:
        return Broken(p, broken, raw[:HEAD], size)
    return json.loads(raw.decode("utf-8"))  # type: ignore[no-any-return]


def _problem(raw: bytes, size: int) -> str | None:
    """Why ``raw`` is not a pointer, or None when it is one."""
    if size > MAX_BYTES:
        return f"{size:,} bytes, not a pointer (at most {MAX_BYTES:,})"
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except json.JSONDecodeError as e:
        return f"not valid JSON at byte {e.pos}"
    if not isinstance(obj, dict) or not isinstance(obj.get("version"), str):
        return "JSON without a 'version' name"
    previous = obj.get("previous", [])
    if not isinstance(previous, list) or not all(isinstance(v, str) for v in previous):
        return "JSON whose 'previous' is not a list of version names"
    return None


def fix(kind_dir: Path, pointer: str) -> str:
    """How a user rewrites ``pointer`` of the kind in ``kind_dir`` (a command they can paste)."""
    where = f"--registry {kind_dir.parent} --kind {kind_dir.name}"
    if pointer == "production":
        return f"point it at a version with `parpo registry promote {where} VERSION`"
    if pointer == "latest":
        return "the next publish rewrites it; until then name a version (`parpo registry list` shows them)"
    return (
        f"rewrite it with `parpo registry alias set {pointer} VERSION {where}` "
        f"or remove it with `parpo registry alias rm {pointer} {where}`"
    )


def error(broken: Broken, kind_dir: Path, pointer: str) -> str:
    """The one line that reports a broken pointer and how to fix it."""
    return f"{broken.path}: pointer is {broken.problem()}; {fix(kind_dir, pointer)}"


def read(kind_dir: Path, pointer: str) -> dict[str, Any] | None:
    """The pointer's JSON, or None when it was never written; RegistryError when it is broken."""
    obj = load(kind_dir, pointer)
    if isinstance(obj, Broken):
        raise RegistryError(error(obj, kind_dir, pointer))
    return obj


def remove(kind_dir: Path, kind: str, pointer: str) -> dict[str, Any] | Broken:
    """Delete ``pointer`` (its history goes with it; a broken file is deleted too); returns what it held."""
    old = load(kind_dir, pointer)
    if old is None:
        raise RegistryError(f"{kind}: no alias {pointer!r} to remove")
    p = path(kind_dir, pointer)
    if p.is_dir():
        raise RegistryError(f"{p} is a folder, not a pointer: move it out of the registry")
    p.unlink()
    fsync_path(kind_dir)
    return old


def move(kind_dir: Path, kind: str, pointer: str, version: str) -> Moved:
    """Point ``pointer`` at ``version``, pushing the old target onto ``previous`` (no-op if equal).

    A broken pointer file is rewritten (its history is lost) and returned in ``Moved.repaired``.
    """
    old = load(kind_dir, pointer)
    if isinstance(old, Broken):
        _write(kind_dir, kind, pointer, version, [])
        return Moved(pointer, version, None, old)
    if old is not None and old["version"] == version:
        return Moved(pointer, version, version)
    previous = [] if old is None else [old["version"], *old.get("previous", [])]
    _write(kind_dir, kind, pointer, version, previous)
    return Moved(pointer, version, None if old is None else old["version"])


def pop(kind_dir: Path, kind: str, pointer: str) -> Moved:
    """Point ``pointer`` back at the version it pointed to before (``previous[0]``)."""
    old = load(kind_dir, pointer)
    if old is None:
        raise RegistryError(f"{kind}: no {pointer} version yet, nothing to roll back")
    if isinstance(old, Broken):
        raise RegistryError(
            f"{kind}: cannot roll back {pointer}: {old.path.name} is {old.problem()}, so the version before it is "
            f"unknown; {fix(kind_dir, pointer)} (`parpo registry list` shows the versions)"
        )
    if not old.get("previous"):
        raise RegistryError(
            f"{kind}: {pointer} {old['version']} has no previous {pointer} version to roll back to"
        )
    _write(kind_dir, kind, pointer, old["previous"][0], list(old["previous"][1:]))
    return Moved(pointer, old["previous"][0], old["version"])


def _write(kind_dir: Path, kind: str, pointer: str, version: str, previous: list[str]) -> dict[str, Any]:
    p = path(kind_dir, pointer)
    if p.is_dir():  # os.replace cannot put a file over a folder
        raise RegistryError(f"{p} is a folder, not a pointer: move it out of the registry and run this again")
    obj = {
        "schema_version": 1,
        "kind": kind,
        "pointer": pointer,
        "version": version,
        "updated": utc_now(),
        "previous": previous[:HISTORY],
    }
    atomic_write_json(p, obj)
    return obj
