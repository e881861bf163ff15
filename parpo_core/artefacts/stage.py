"""Staging a version: write into a hidden temp folder, then publish with one rename.

```python
with registry.stage("reward") as st:
    st.write_weights({"user_interest": u, "item_interest": i})   # weights/model.safetensors
    st.write_config(cfg)                                          # config.yaml
    st.add_idmaps(dataset_dir / "idmaps")                         # idmaps/...
    st.add_logs(run_dir / "metrics.csv")                          # logs/metrics.csv
    st.lineage = Lineage(data_fingerprint=fp, split=SplitRef(name="temporal", seed=0), seed=1)
    st.metrics = {"valid": {...}, "test": {"ndcg@10": 0.31, ...}}
    version = st.publish()
```

Leaving the block without ``publish`` (or with an exception) deletes the
staging folder: no version appears and no pointer moves. While the block runs the
staging folder is ``flock``ed, so ``parpo registry clean`` (``leftovers``) leaves it alone.
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from parpo_core.artefacts import leftovers
from parpo_core.artefacts.errors import RegistryError
from parpo_core.artefacts.jsonio import dumps
from parpo_core.artefacts.layout import (
    CONFIG,
    EVALS,
    IDMAPS,
    LINEAGE,
    LOGS,
    METADATA,
    METRICS,
    STAGING_PREFIX,
    WEIGHTS,
    check_kind,
    check_relpath,
)
from parpo_core.artefacts.lineage import Lineage

if TYPE_CHECKING:
    from torch import Tensor

    from parpo_core.artefacts.registry import Registry
    from parpo_core.artefacts.version import Version

METRICS_SCHEMA_VERSION = 1


def compose_metrics(metrics: Mapping[str, Any], lineage: Lineage) -> dict[str, Any]:
    """``metrics.json``: the training split's identity from the lineage, then the given sections."""
    head = {
        "schema_version": METRICS_SCHEMA_VERSION,
        "split": lineage.split.name,
        "seed": lineage.split.seed,
        "data_fingerprint": lineage.data_fingerprint,
    }
    for k in ("split", "seed", "data_fingerprint"):
        if k in metrics and metrics[k] != head[k]:
            raise RegistryError(
                f"metrics.json {k}={metrics[k]!r} differs from the lineage's {head[k]!r}: metrics at "
                "publish are for the training split only (later evaluations go to evals/)"
            )
    return head | {k: v for k, v in metrics.items() if k not in head}


def make_read_only(root: Path) -> None:
    """Published files are read-only (0444): immutability a stray ``open(..., 'w')`` notices."""
    for dirpath, _, filenames in os.walk(root):
        for fn in filenames:
            p = os.path.join(dirpath, fn)
            os.chmod(p, stat.S_IMODE(os.lstat(p).st_mode) & ~0o222)


class Stage:
    """A version being assembled in ``REG/<kind>/.staging-<pid>-<hex>/``; see the module docstring."""

    def __init__(self, registry: Registry, kind: str) -> None:
        self.registry = registry
        self.kind = check_kind(kind)
        self.lineage: Lineage | None = None
        self.metrics: dict[str, Any] | None = None
        self.version: Version | None = None
        self._dir: Path | None = None
        self._lock: int | None = None

    # -- context -----------------------------------------------------------------
    def __enter__(self) -> Stage:
        kdir = self.registry.kind_dir(self.kind)
        kdir.mkdir(parents=True, exist_ok=True)
        self._dir = kdir / f"{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._dir.mkdir()
        # Held until publish or discard: `parpo registry clean` never removes a locked folder.
        self._lock = leftovers.hold(self._dir)
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def discard(self) -> None:
        """Delete the staging folder unless it was published (idempotent)."""
        if self._dir is not None and self.version is None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None
        leftovers.release(self._lock)
        self._lock = None

    @property
    def dir(self) -> Path:
        """The staging folder (files written here land in the version as they are)."""
        if self._dir is None:
            state = "published" if self.version is not None else "not open"
            raise RuntimeError(f"stage is {state}: use `with registry.stage(kind) as st: ...; st.publish()`")
        return self._dir

    # -- writing -----------------------------------------------------------------
    def path(self, rel: str) -> Path:
        """Where ``rel`` goes in the staging folder (parents created), for writers that want a path,
        e.g. ``frame.write_parquet(st.path("catalogue/items.parquet"))``."""
        p = self.dir / check_relpath(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_bytes(self, rel: str, data: bytes) -> Path:
        p = self.path(rel)
        p.write_bytes(data)
        return p

    def write_text(self, rel: str, text: str) -> Path:
        return self.write_bytes(rel, text.encode())

    def write_json(self, rel: str, obj: Any) -> Path:
        return self.write_text(rel, dumps(obj))

    def write_yaml(self, rel: str, obj: Any) -> Path:
        import yaml

        if hasattr(obj, "model_dump"):
            obj = obj.model_dump(mode="json")
        return self.write_text(rel, yaml.safe_dump(obj, sort_keys=False, allow_unicode=True))

    def write_config(self, config: Any) -> Path:
        """``config.yaml``: the resolved training config (a dict or a pydantic model)."""
        return self.write_yaml(CONFIG, config)

    def write_metadata(self, metadata: Mapping[str, Any]) -> Path:
        """``metadata.json``: free-form facts a loader needs (shapes, class names, id-map sizes)."""
        return self.write_json(METADATA, dict(metadata))

    def write_weights(
        self, tensors: Mapping[str, Tensor], name: str = "model", metadata: Mapping[str, str] | None = None
    ) -> Path:
        """``weights/<name>.safetensors`` (tensors moved to CPU, made contiguous)."""
        from parpo_core.artefacts.weights import save_weights

        p = self.path(f"{WEIGHTS}/{name}.safetensors")
        save_weights(tensors, p, metadata=metadata, durable=False)  # publish fsyncs the whole tree
        return p

    def copy(self, src: str | Path, rel: str) -> Path:
        """Copy a file or a whole folder (symlinks followed, hidden files skipped) to ``rel``."""
        src = Path(src)
        dst = self.path(rel)
        if src.is_dir():  # hidden files (editor and OS droppings, temp files) are left behind
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".*"))
        elif src.is_file():
            shutil.copyfile(src, dst)
        else:
            raise RegistryError(f"cannot add {src} to the version: no such file or folder")
        return dst

    def add_idmaps(self, maps: Path | str | Mapping[str, Path | str]) -> Path:
        """Id maps under ``idmaps/``: a folder (copied as is) or ``{"users": path, ...}``
        (each stored as ``idmaps/<name><suffix>``)."""
        if isinstance(maps, Mapping):
            for name, src in maps.items():
                self.copy(src, f"{IDMAPS}/{name}{Path(src).suffix}")
            return self.dir / IDMAPS
        return self.copy(maps, IDMAPS)

    def add_logs(self, logs: Path | str) -> Path:
        """Training logs: a CSV file becomes ``logs/metrics.csv``; a folder is copied to ``logs/``."""
        logs = Path(logs)
        return self.copy(logs, LOGS) if logs.is_dir() else self.copy(logs, f"{LOGS}/metrics.csv")

    # -- publishing --------------------------------------------------------------
    def publish(self) -> Version:
        """Write lineage and metrics, fsync, hash, take the next name and rename into place.

        The rename is the commit point. The first version of a kind also becomes
        ``production``; every version becomes ``latest``.
        """
        staging = self.dir
        if self.lineage is None:
            raise RegistryError("publish needs a lineage: set `st.lineage = Lineage(...)` before publish()")
        try:
            lineage = Lineage.model_validate(self.lineage)
        except ValidationError as e:
            err = e.errors()[0]
            raise RegistryError(f"lineage: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
        if (staging / EVALS).exists():
            raise RegistryError("evals/ is written by add_eval after publish, not while staging")
        if lineage.parent is not None:
            # A typo'd parent fails here, not months later; aliases (latest, 3) become full names.
            parent = self.registry.resolve(self.kind, lineage.parent).name
            lineage = lineage.model_copy(update={"parent": parent})
        if lineage.reward is not None:
            lineage = lineage.model_copy(
                update={"reward": self.registry.resolve("reward", lineage.reward).name}
            )
        self.write_json(LINEAGE, lineage.model_dump(mode="json"))
        if self.metrics is not None:
            self.write_json(METRICS, compose_metrics(self.metrics, lineage))
        self.version = self.registry.commit(self.kind, staging)
        self._dir = None
        leftovers.release(self._lock)  # after the rename: the staging name is gone by now
        self._lock = None
        return self.version
