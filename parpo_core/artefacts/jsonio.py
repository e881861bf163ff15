"""JSON as the registry writes it: plain values only, no NaN, a canonical form for hashing."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any


def to_json(obj: Any) -> Any:
    """Plain JSON values: tensor/numpy scalars via ``.item()``, arrays via ``.tolist()``, pydantic
    models dumped, paths as strings; NaN and infinities become null (they are not JSON)."""
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_json(v) for v in obj]
    if hasattr(obj, "model_dump"):
        return to_json(obj.model_dump(mode="json"))
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    for conv in ("item", "tolist"):
        if callable(getattr(obj, conv, None)):
            try:
                return to_json(getattr(obj, conv)())
            except (TypeError, ValueError):
                continue
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def dumps(obj: Any) -> str:
    return json.dumps(to_json(obj), indent=2, allow_nan=False) + "\n"


def canonical_json(obj: Any) -> str:
    """Sorted keys, no spaces: equal values give equal strings (and equal hashes)."""
    return json.dumps(to_json(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)
