"""Source adapters: one module per raw format, each with ``source(path, ...) -> Source``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from data_pipelines.adapters import amazon, canonical, coat, movielens, obd, parpo_events, taobao
from data_pipelines.adapters.base import FileSpec, Source
from parpo_core.names import NameRegistry

ADAPTERS: NameRegistry[Callable[..., Source]] = NameRegistry("source")
for _name, _module in (
    ("taobao", taobao),
    ("amazon-s3rec", amazon),
    ("movielens", movielens),
    ("coat", coat),
    ("obd", obd),
    ("parpo-events", parpo_events),
    ("canonical", canonical),
):
    ADAPTERS.add(_name, _module.source)


def open_source(name: str, path: Path, mapping: Path | None = None) -> Source:
    """The ``Source`` for ``--source name --input path [--map mapping]``."""
    from parpo_core.errors import DataError

    adapter = ADAPTERS[name]
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    if mapping is not None and name != "canonical":
        raise DataError("--map applies to --source canonical only")
    return adapter(path, mapping) if name == "canonical" else adapter(path)


__all__ = ["ADAPTERS", "FileSpec", "Source", "open_source"]
