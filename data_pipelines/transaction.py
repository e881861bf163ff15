"""Atomic publication of dataset changes.

A change is staged in ``DIR/.txn-<id>/`` (same file names as their final
places), fsynced, and committed by one atomic replace of ``manifest.json`` that
records the transaction as pending. The staged files are then moved into place
and the pending mark is cleared. ``recover`` (run whenever a dataset is opened)
rolls a committed transaction forward and deletes an uncommitted one, so a
crash at any point leaves either the old or the new dataset, never a mix.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from parpo_core.durable import atomic_write_json, fsync_path

MANIFEST = "manifest.json"


def read_manifest(root: Path) -> dict[str, Any] | None:
    p = root / MANIFEST
    if not p.exists():
        return None
    return json.loads(p.read_text())


class Transaction:
    """Stage files under ``root/.txn-<id>/`` and publish them with one manifest swap."""

    def __init__(self, root: Path, txn_id: str | None = None) -> None:
        self.root = root
        self.id = txn_id or uuid.uuid4().hex[:12]
        self.dir = root / f".txn-{self.id}"
        self.dir.mkdir(parents=True, exist_ok=False)
        self._files: list[str] = []
        self.committed = False

    def path(self, rel: str) -> Path:
        """Staging path for the file that will live at ``root/rel``."""
        p = self.dir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel not in self._files:
            self._files.append(rel)
        return p

    def scratch(self, name: str) -> Path:
        """A scratch folder inside the transaction, never published."""
        p = self.dir / "_scratch" / name
        p.mkdir(parents=True, exist_ok=True)
        return p

    def commit(self, manifest: dict[str, Any]) -> None:
        shutil.rmtree(self.dir / "_scratch", ignore_errors=True)
        for rel in self._files:
            fsync_path(self.dir / rel)
        fsync_path(self.dir)
        manifest = dict(manifest, pending={"txn": self.id, "files": list(self._files)})
        atomic_write_json(self.root / MANIFEST, manifest)  # the commit point
        self.committed = True
        apply_pending(self.root)

    def abort(self) -> None:
        """Drop an uncommitted transaction; a committed one is kept for roll-forward."""
        if not self.committed:
            shutil.rmtree(self.dir, ignore_errors=True)


def apply_pending(root: Path) -> None:
    """Move a committed transaction's files into place (idempotent), then clear the mark."""
    manifest = read_manifest(root)
    if not manifest or not manifest.get("pending"):
        return
    pending = manifest["pending"]
    txn_dir = root / f".txn-{pending['txn']}"
    for rel in pending["files"]:
        src = txn_dir / rel
        if src.exists():
            dst = root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
            fsync_path(dst.parent)
    manifest.pop("pending")
    atomic_write_json(root / MANIFEST, manifest)
    shutil.rmtree(txn_dir, ignore_errors=True)


def recover(root: Path) -> None:
    """Roll forward a committed transaction; delete staging folders that never committed."""
    if not root.exists():
        return
    apply_pending(root)
    for d in root.glob(".txn-*"):
        shutil.rmtree(d, ignore_errors=True)
