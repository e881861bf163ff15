"""Add-only evaluations: ``evals/<data-fingerprint[:16]>-<split>-<eval-config-hash[:12]>.json``.

An evaluation names the data it ran on (fingerprint), the split and the
evaluation config; the same three give the same file. Writing an identical
result again is a no-op; a different result under the same name is an error
(evaluations are never overwritten). ``evals/`` is outside the manifest, so
adding one never changes a version's verified content.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from parpo_core.artefacts.errors import RegistryError
from parpo_core.artefacts.jsonio import canonical_json, dumps, to_json
from parpo_core.artefacts.layout import EVALS
from parpo_core.durable import fsync_path

SCHEMA_VERSION = 1
SPLIT_RE = re.compile(r"^[A-Za-z0-9_.]+$")


def config_hash(eval_config: dict[str, Any]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of an evaluation config."""
    return hashlib.sha256(canonical_json(eval_config).encode()).hexdigest()


def eval_name(data_fingerprint: str, split: str, eval_config: dict[str, Any]) -> str:
    if not SPLIT_RE.match(split):
        raise RegistryError(f"split name {split!r} may only hold letters, digits, '_' and '.'")
    if not re.match(r"^[A-Za-z0-9]+$", data_fingerprint):
        raise RegistryError(
            f"data fingerprint {data_fingerprint!r} is not a digest (letters and digits only)"
        )
    return f"{data_fingerprint[:16]}-{split}-{config_hash(eval_config)[:12]}.json"


def write_eval(
    version_dir: Path,
    label: str,
    data_fingerprint: str,
    split: str,
    eval_config: dict[str, Any],
    result: dict[str, Any],
) -> Path:
    """Create the eval file atomically and exclusively; see the module docstring."""
    name = eval_name(data_fingerprint, split, eval_config)
    record = {
        "schema_version": SCHEMA_VERSION,
        "version": label,
        "data_fingerprint": data_fingerprint,
        "split": split,
        "eval_config": to_json(eval_config),
        "eval_config_hash": config_hash(eval_config),
        "result": to_json(result),
    }
    d = version_dir / EVALS
    d.mkdir(exist_ok=True)
    dst = d / name
    if dst.exists():
        return _same_or_fail(dst, record, label)
    tmp = d / f".{name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(dumps(record).encode())
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, dst)  # fails if dst exists: two racing writers cannot both win
        except FileExistsError:
            return _same_or_fail(dst, record, label)
    finally:
        tmp.unlink(missing_ok=True)
    os.chmod(dst, 0o444)
    fsync_path(d)
    return dst


def _same_or_fail(dst: Path, record: dict[str, Any], label: str) -> Path:
    try:
        old = json.loads(dst.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise RegistryError(f"{label}: {EVALS}/{dst.name} exists but is unreadable ({e})") from None
    if canonical_json(old) != canonical_json(record):
        raise RegistryError(
            f"{label}: {EVALS}/{dst.name} already holds a different result for the same data, split "
            "and eval config; evaluations are add-only (change the eval config to record a new one)"
        )
    return dst


def read_evals(version_dir: Path) -> list[dict[str, Any]]:
    """Every evaluation of a version, sorted by file name, each with its ``file`` name added."""
    d = version_dir / EVALS
    out = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            out.append({"file": p.name, **json.loads(p.read_text())})
        except (OSError, json.JSONDecodeError):
            out.append({"file": p.name, "error": "unreadable"})
    return out
