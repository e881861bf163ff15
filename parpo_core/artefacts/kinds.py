"""Artefact kinds: what each kind of version is, and which of its metrics a listing shows.

The registry stores any registered kind the same way; a ``KindSpec`` only says
how to summarise a version in ``parpo registry list``. ``reward_models``
registers ``reward`` and ``parpo`` registers ``policy`` when they are imported;
a new kind (say a ``memory`` snapshot) registers its own spec the same way:

```python
KINDS.add("memory", KindSpec("memory", "skill graph snapshots", columns=("skills",),
                             read_metrics=metrics_json_section("summary", ("skills",))))
```
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parpo_core.names import NameRegistry

#: ``read_metrics(version_dir) -> (metrics, source)``: the key metrics of a version and a label of
#: where they were read from (e.g. ``"test"``, ``"eval warm/cold"``, ``"training"``).
MetricsReader = Callable[[Path], tuple[dict[str, float], str | None]]


@dataclass(frozen=True)
class KindSpec:
    """One artefact kind: its name, a line for ``--help``, the metric columns a listing shows
    and how to read them from a version folder (small files only, never weights)."""

    name: str
    description: str
    columns: tuple[str, ...] = ()
    read_metrics: MetricsReader = field(default=lambda _path: ({}, None))


KINDS: NameRegistry[KindSpec] = NameRegistry("artefact kind")


def register_kind(spec: KindSpec) -> KindSpec:
    """Register ``spec`` once (importing the registering package twice is not an error)."""
    return KINDS.setdefault(spec.name, spec)


def numbers(section: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, float]:
    """The entries of ``keys`` in ``section`` that are numbers, as floats."""
    section = section or {}
    return {k: float(section[k]) for k in keys if isinstance(section.get(k), int | float)}


def metrics_json_section(section: str, keys: tuple[str, ...]) -> MetricsReader:
    """A reader of ``keys`` from ``metrics.json[section]`` (labelled ``section``)."""

    def read(path: Path) -> tuple[dict[str, float], str | None]:
        p = path / "metrics.json"
        if not p.is_file():
            return {}, None
        found = numbers(json.loads(p.read_text()).get(section), keys)
        return found, section if found else None

    return read
