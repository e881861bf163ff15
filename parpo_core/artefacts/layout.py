"""Where things live in a registry, and what a version name looks like.

```
REG/<kind>/v000001-20261130T131500Z/   one immutable version
REG/<kind>/latest.json                 pointer: the newest published version
REG/<kind>/production.json             pointer: the version commands read by default
REG/<kind>/<alias>.json                any other named pointer (staging, challenger, ...)
REG/<kind>/.lock                       flock'd while a name is taken or a pointer moves
REG/<kind>/.staging-<pid>-<hex>/       a publish in progress (never listed)
```

A version name is ``v`` + a zero-padded publish number + the UTC publish time,
so plain string order is publish order (the number decides; the time is for
people).
"""

from __future__ import annotations

import difflib
import re
from datetime import UTC, datetime
from pathlib import PurePosixPath

from parpo_core.artefacts.errors import RegistryError
from parpo_core.artefacts.kinds import KINDS

#: Pointers the registry itself moves: ``latest`` on every publish, ``production`` on promote.
RESERVED: tuple[str, ...] = ("latest", "production")
ALIAS_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
NUMBER_WIDTH = 6  # 999,999 publishes per kind before string order would break
VERSION_RE = re.compile(rf"^v(\d{{{NUMBER_WIDTH}}})-(\d{{8}}T\d{{6}}Z)$")

MANIFEST = "manifest.json"
LINEAGE = "lineage.json"
METRICS = "metrics.json"
CONFIG = "config.yaml"
METADATA = "metadata.json"
EVALS = "evals"
WEIGHTS = "weights"
IDMAPS = "idmaps"
LOGS = "logs"
LOCK = ".lock"
STAGING_PREFIX = ".staging-"


def check_kind(kind: str) -> str:
    """``kind`` when it is a registered artefact kind; RegistryError naming the known ones."""
    if kind not in KINDS:
        known = ", ".join(KINDS.names()) or "none registered"
        raise RegistryError(f"unknown registry kind {kind!r}; choose one of {known}")
    return kind


def is_alias_name(name: str) -> bool:
    """``[a-z][a-z0-9_-]*`` and not a version number such as ``v3``."""
    return bool(ALIAS_RE.match(name)) and not re.match(r"^v\d+$", name)


def check_alias(name: str, *, settable: bool = False) -> str:
    """A pointer name: ``[a-z][a-z0-9_-]*`` and not a version number (``v3``); ``settable``
    refuses the reserved ``latest`` and ``production`` (those move by publish and promote)."""
    if not is_alias_name(name):
        raise RegistryError(
            f"alias {name!r} must match [a-z][a-z0-9_-]* and not look like a version number (v3)"
        )
    if settable and name in RESERVED:
        how = "publish moves it" if name == "latest" else "use `parpo registry promote`"
        raise RegistryError(f"alias {name!r} is reserved ({how})")
    return name


def utc_now() -> str:
    """ISO 8601 UTC time to the second, e.g. ``2026-11-30T13:15:00Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def version_name(number: int, when: datetime | None = None) -> str:
    when = when or datetime.now(UTC)
    return f"v{number:0{NUMBER_WIDTH}d}-{when.strftime('%Y%m%dT%H%M%SZ')}"


def version_number(name: str) -> int | None:
    m = VERSION_RE.match(name)
    return int(m.group(1)) if m else None


def is_version_name(name: str) -> bool:
    return VERSION_RE.match(name) is not None


def check_relpath(rel: str | PurePosixPath) -> str:
    """A file's path inside a version: relative, POSIX, no ``..``, not a reserved name."""
    p = PurePosixPath(str(rel).replace("\\", "/"))
    parts = p.parts
    if not parts or p.is_absolute() or any(part in ("", ".", "..") for part in parts):
        raise RegistryError(f"{str(rel)!r} is not a relative path inside a version")
    if parts[0] == EVALS:
        raise RegistryError(f"{rel}: evals/ is written by add_eval after publish, not while staging")
    if str(p) == MANIFEST:
        raise RegistryError(f"{MANIFEST} is written by publish itself")
    if any(part.startswith(".") for part in parts):
        raise RegistryError(f"{rel}: hidden files are not allowed in a version")
    return str(p)


def nearby(name: str, names: list[str], n: int = 3) -> list[str]:
    """Versions a mistyped ``name`` may have meant: nearest publish numbers, else closest spellings."""
    if not names:
        return []
    digits = re.match(r"^v?0*(\d+)", name)
    if digits:
        want = int(digits.group(1))
        numbered = [(abs((version_number(v) or 0) - want), v) for v in names]
        return [v for _, v in sorted(numbered)[:n]]
    return difflib.get_close_matches(name, names, n=n, cutoff=0.3) or names[-n:]
