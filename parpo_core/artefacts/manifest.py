"""``manifest.json``: sha256 and size of every file of a version.

Everything in a version is covered except ``manifest.json`` itself and
``evals/`` (evaluations are added after publish). ``problems`` recomputes the
hashes and reports missing, changed and unexpected files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from parpo_core.artefacts.errors import RegistryError
from parpo_core.artefacts.layout import EVALS, MANIFEST
from parpo_core.durable import sha256_file

SCHEMA_VERSION = 1


def covered_files(root: Path) -> Iterator[str]:
    """Relative POSIX paths of the files a manifest covers, sorted."""
    rels = []
    for p in root.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            continue
        rel = p.relative_to(root).as_posix()
        if rel == MANIFEST or rel.split("/", 1)[0] == EVALS:
            continue
        rels.append(rel)
    yield from sorted(rels)


def build(root: Path) -> dict[str, dict[str, Any]]:
    """``{relpath: {"sha256": ..., "size": ...}}`` for every covered file under ``root``."""
    return {
        rel: {"sha256": sha256_file(root / rel), "size": (root / rel).stat().st_size}
        for rel in covered_files(root)
    }


def read(path: Path, label: str) -> dict[str, Any]:
    """The manifest of the version at ``path``; RegistryError when absent or unreadable."""
    p = path / MANIFEST
    if not p.is_file():
        raise RegistryError(f"{label}: incomplete version (no {MANIFEST}); it cannot be loaded")
    try:
        m = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RegistryError(f"{label}: {MANIFEST} is not valid JSON ({e})") from None
    if not isinstance(m, dict) or not isinstance(m.get("files"), dict):
        raise RegistryError(f"{label}: {MANIFEST} has no 'files' table")
    if m.get("schema_version", 0) > SCHEMA_VERSION:
        raise RegistryError(
            f"{label}: {MANIFEST} schema_version {m['schema_version']} is newer than this "
            f"package reads ({SCHEMA_VERSION}); upgrade parpo"
        )
    return m


def problems(root: Path, files: dict[str, dict[str, Any]], *, hashes: bool = True) -> list[str]:
    """What differs between ``root`` and its manifest ``files``, sorted by path; [] when intact.

    With ``hashes=False`` only presence and sizes are checked (fast).
    """
    out: list[tuple[str, str]] = []
    for rel, entry in files.items():
        p = root / rel
        if not p.is_file():
            out.append((rel, f"missing file {rel}"))
        elif p.stat().st_size != entry.get("size"):
            out.append((rel, f"changed file {rel} (size {p.stat().st_size}, manifest {entry.get('size')})"))
        elif hashes and sha256_file(p) != entry.get("sha256"):
            out.append((rel, f"changed file {rel} (sha256 differs from the manifest)"))
    for rel in covered_files(root):
        if rel not in files:
            out.append((rel, f"unexpected file {rel} (not in the manifest)"))
    return [msg for _, msg in sorted(out)]
