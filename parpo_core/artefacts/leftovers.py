"""Leftovers of killed publishes, and the rule that tells them from a publish still running.

A publish builds its version in ``REG/<kind>/.staging-<pid>-<hex>/`` and renames it into
place; a process killed before the rename leaves that folder behind (and, killed while moving
a pointer, a ``.<pointer>.json.<hex>.tmp`` file). They are never listed or loaded, only
wasted space. ``find`` reports them and ``remove`` deletes one.

The rule (``Leftover.removable``): a leftover is removed only when

1. no process holds its lock: ``Stage`` keeps an exclusive ``flock`` on its staging folder
   from creation until publish or discard, and the kernel drops it when the process dies
   (SIGKILL included); a pointer's temp file lives only while the kind's ``.lock`` is held;
2. and nothing in it has changed for ``older_than`` seconds (default 10 minutes).

The lock is the proof a publish is alive; the age guard covers the instant between
``mkdir`` and ``flock``, and filesystems that do not honour ``flock`` (there the age alone
decides, so a publish on such a filesystem must not sit idle that long). The pid in the name
is only informational: pids are per machine and per pid namespace (a publish in a container
is invisible to ``kill -0`` on the host) and are reused.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from parpo_core.artefacts.layout import LOCK, STAGING_PREFIX

#: Leftovers changed more recently than this are kept (seconds).
DEFAULT_OLDER_THAN = 600.0
#: ``durable.temp_sibling`` of a pointer: ``.production.json.1a2b3c4d.tmp``.
POINTER_TMP_RE = re.compile(r"^\.[a-z][a-z0-9_-]*\.json\.[0-9a-f]{8}\.tmp$")


def hold(folder: Path) -> int | None:
    """Take an exclusive ``flock`` on ``folder`` for as long as the returned fd stays open
    (``release`` it); None where the filesystem has no flock for folders."""
    fd = os.open(folder, os.O_RDONLY)
    try:  # blocking: `find` may be testing this very lock for an instant
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        return None
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing drops the flock


@contextmanager
def _try_lock(path: Path) -> Iterator[bool | None]:
    """Try ``flock(LOCK_EX | LOCK_NB)`` on ``path``: True while held, False when another process
    holds it, None when the lock cannot be taken here (no such file, no flock support)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            yield False if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None
            return
        yield True
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Leftover:
    """A staging folder or a pointer temp file in a kind folder."""

    path: Path
    size: int  # bytes of its files (what removing it frees)
    files: int
    idle_s: float  # seconds since anything in it last changed (newest mtime in the tree)
    in_use: bool  # a live process holds its lock

    def removable(self, older_than: float) -> bool:
        return self.why_kept(older_than) is None

    def why_kept(self, older_than: float) -> str | None:
        """Why ``remove`` would keep it, or None when it would go."""
        if self.in_use:
            lock = "its folder" if self.path.is_dir() else LOCK
            return f"a running publish holds the lock on {lock}"
        if self.idle_s < older_than:
            return f"changed {_ago(self.idle_s)} ago, under --older-than {_ago(older_than)}"
        return None


def _ago(seconds: float) -> str:
    """``45 s``, ``10 min``, ``1.5 h``, ``2 d``."""
    for unit, n in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= n:
            return f"{seconds / n:.1f}".removesuffix(".0") + f" {unit}"
    return f"{seconds:.0f} s"


def _measure(path: Path, now: float) -> tuple[int, int, float]:
    """(bytes, files, idle seconds) of a file or a folder tree (symlinks not followed)."""
    size = files = 0
    newest = 0.0
    paths = [path]
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            paths += [Path(dirpath, n) for n in (*dirnames, *filenames)]
    for p in paths:
        try:
            st = p.lstat()
        except FileNotFoundError:
            continue
        newest = max(newest, st.st_mtime)
        if not p.is_dir() or p.is_symlink():
            size += st.st_size
            files += 1
    return size, files, max(0.0, now - newest)


def find(kind_dir: Path, *, now: float | None = None) -> list[Leftover]:
    """The staging folders and pointer temp files in ``kind_dir``, sorted by name."""
    if not kind_dir.is_dir():
        return []
    now = time.time() if now is None else now
    out = []
    for p in sorted(kind_dir.iterdir()):
        if p.name.startswith(STAGING_PREFIX) and p.is_dir() and not p.is_symlink():
            with _try_lock(p) as got:
                in_use = got is False
        elif POINTER_TMP_RE.match(p.name) and p.is_file():
            with _try_lock(kind_dir / LOCK) as got:
                in_use = got is False
        else:
            continue
        size, files, idle = _measure(p, now)
        if p.exists():  # else it was published or removed while we looked
            out.append(Leftover(p, size, files, idle, in_use))
    return out


def remove(leftover: Leftover) -> tuple[int, str | None]:
    """Delete ``leftover`` while holding its lock: (bytes freed, why some of it is still there or
    None). One whose lock a process holds by now is kept; one already gone frees nothing."""
    p = leftover.path
    errors: list[str] = []
    with _try_lock(p if p.is_dir() else p.parent / LOCK) as got:
        if got is False:
            return 0, "a publish took its lock before it could be removed"
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, onerror=lambda _f, path, exc: errors.append(f"{path}: {exc[1]}"))
            else:
                p.unlink(missing_ok=True)
        except OSError as e:
            errors.append(str(e))
    if not p.exists():
        return leftover.size, None
    left = _measure(p, time.time())[0]
    return max(0, leftover.size - left), f"could not delete all of it ({errors[0] if errors else 'unknown'})"


@dataclass
class Cleaned:
    """What ``clean`` removed (with the bytes each freed) and what it kept (and why)."""

    removed: list[tuple[Leftover, int]] = field(default_factory=list)
    kept: list[tuple[Leftover, str]] = field(default_factory=list)
    freed_partly: int = 0  # bytes freed from leftovers that could not be removed whole

    @property
    def freed(self) -> int:
        """Bytes freed in all (or that would be, in a dry run)."""
        return sum(n for _, n in self.removed) + self.freed_partly


def clean(
    kind_dir: Path, *, older_than: float = DEFAULT_OLDER_THAN, dry_run: bool = False, now: float | None = None
) -> Cleaned:
    """Remove the removable leftovers in ``kind_dir`` (``dry_run``: only report them)."""
    found = find(kind_dir, now=now)
    out = Cleaned()
    for x in found:
        why = x.why_kept(older_than)
        if why is not None:
            out.kept.append((x, why))
            continue
        if not x.path.exists():
            continue  # removed by another clean since `find`
        freed, problem = (x.size, None) if dry_run else remove(x)
        if problem is None:
            out.removed.append((x, freed))
        else:
            out.kept.append((x, problem))
            out.freed_partly += freed
    return out
