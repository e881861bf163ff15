"""Source adapters: one module per raw format, each with ``source(path, ...) -> Source``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from data_pipelines.adapters import amazon, canonical, coat, movielens, obd, parpo_events, taobao
from data_pipelines.adapters.base import FileSpec, Source

ADAPTERS: dict[str, Callable[..., Source]] = {
    "taobao": taobao.source,
    "amazon-s3rec": amazon.source,
    "movielens": movielens.source,
    "coat": coat.source,
    "obd": obd.source,
    "parpo-events": parpo_events.source,
    "canonical": canonical.source,
}


def open_source(name: str, path: Path, mapping: Path | None = None) -> Source:
    """The ``Source`` for ``--source name --input path [--map mapping]``."""
    from data_pipelines.errors import DataError

    if name not in ADAPTERS:
        raise DataError(f"unknown source {name!r} (expected one of: {', '.join(ADAPTERS)})")
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    if mapping is not None and name != "canonical":
        raise DataError("--map applies to --source canonical only")
    return ADAPTERS[name](path, mapping) if name == "canonical" else ADAPTERS[name](path)


__all__ = ["ADAPTERS", "FileSpec", "Source", "open_source"]
