"""Durable writes: a file or a folder appears whole at its final path, or not at all.

Every writer in the project goes through these: a single file is written to a
temp sibling, fsynced and renamed (``atomic_write_bytes``); a folder is built
in a temp sibling, fsynced file by file and renamed into place
(``publish_dir``). After a rename the parent folder is fsynced too, so the new
name survives a power cut.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any


def fsync_path(path: Path) -> None:
    """fsync a file (its bytes) or a folder (the names created or renamed in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file, then every folder bottom-up (so the entries are durable too)."""
    dirs = [root]
    for dirpath, dirnames, filenames in os.walk(root):
        for fn in filenames:
            fsync_path(Path(dirpath) / fn)
        dirs.extend(Path(dirpath) / d for d in dirnames)
    for d in reversed(dirs):
        fsync_path(d)


def temp_sibling(path: Path, suffix: str = ".tmp") -> Path:
    """A hidden, unique name beside ``path`` (same filesystem, so the rename is atomic)."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}{suffix}")


def atomic_write_with(path: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temp sibling of ``path``, fsync it and rename it to ``path``.

    For writers that want a path (parquet, safetensors); the temp file is removed on failure.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        write(tmp)
        fsync_path(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_path(path.parent)
    return path


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write ``path`` via a temp file in the same folder + fsync + rename."""
    return atomic_write_with(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_json(path: Path, obj: Any) -> Path:
    return atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n").encode())


def publish_dir(staging: Path, dest: Path, *, replace: bool = False) -> Path:
    """Make the folder ``staging`` durable and rename it to ``dest`` (the commit point).

    ``dest`` must not exist unless ``replace``: then the old folder is moved aside
    first and deleted after the rename, so a crash leaves the old or the new
    folder at ``dest`` (plus, at worst, a hidden ``.old`` sibling), never a mix.
    """
    fsync_tree(staging)
    old = None
    if dest.exists():
        if not replace:
            raise FileExistsError(f"{dest} already exists")
        old = temp_sibling(dest, ".old")
        os.rename(dest, old)
    os.rename(staging, dest)
    fsync_path(dest.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return dest


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes (streamed)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
