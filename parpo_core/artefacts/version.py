"""A published version (read side) and its one-line summary for listings."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parpo_core.artefacts.errors import RegistryError
from parpo_core.artefacts.layout import CONFIG, EVALS, LINEAGE, METADATA, METRICS, WEIGHTS
from parpo_core.artefacts.lineage import Lineage

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class Version:
    """An opened version: its folder and manifest, with typed readers for the standard files.

    Returned by ``Registry.open`` (verified against its manifest unless asked
    otherwise) and by ``Stage.publish``. Reading goes through the manifest, so a
    file that was never published cannot be read by accident.
    """

    kind: str
    name: str
    path: Path
    manifest: dict[str, Any] = field(repr=False)

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def published(self) -> str | None:
        return self.manifest.get("published")

    def files(self, prefix: str = "") -> list[str]:
        """Manifest paths (sorted), optionally only those under ``prefix``."""
        return sorted(rel for rel in self.manifest["files"] if rel.startswith(prefix))

    def has(self, rel: str) -> bool:
        return rel in self.manifest["files"]

    def file(self, rel: str) -> Path:
        """The path of a published file; RegistryError when the version has no such file."""
        if rel not in self.manifest["files"]:
            raise RegistryError(f"{self.label}: no file {rel!r} in this version")
        return self.path / rel

    def read_json(self, rel: str) -> Any:
        try:
            return json.loads(self.file(rel).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise RegistryError(f"{self.label}: {rel} is not readable JSON ({e})") from None

    def read_yaml(self, rel: str) -> Any:
        import yaml

        try:
            return yaml.safe_load(self.file(rel).read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            raise RegistryError(f"{self.label}: {rel} is not readable YAML ({e})") from None

    @cached_property
    def lineage(self) -> Lineage:
        from pydantic import ValidationError

        try:
            return Lineage.model_validate(self.read_json(LINEAGE))
        except ValidationError as e:
            raise RegistryError(f"{self.label}: {LINEAGE} is invalid ({e.errors()[0]['msg']})") from None

    @cached_property
    def metrics(self) -> dict[str, Any] | None:
        """``metrics.json`` (the training split's valid/test/synthetic metrics), None if absent."""
        return self.read_json(METRICS) if self.has(METRICS) else None

    @cached_property
    def config(self) -> dict[str, Any]:
        return (self.read_yaml(CONFIG) or {}) if self.has(CONFIG) else {}

    @cached_property
    def metadata(self) -> dict[str, Any]:
        return self.read_json(METADATA) if self.has(METADATA) else {}

    def weights_path(self, name: str = "model") -> Path:
        return self.file(f"{WEIGHTS}/{name}.safetensors")

    def load_weights(self, name: str = "model", device: str = "cpu") -> dict[str, Tensor]:
        """Tensors of ``weights/<name>.safetensors`` (safetensors only, never pickle)."""
        from parpo_core.artefacts.weights import load_weights

        return load_weights(self.weights_path(name), device=device)

    def eval_paths(self) -> list[Path]:
        """Evaluation files added after publish (``evals/*.json``), sorted by name."""
        d = self.path / EVALS
        return sorted(d.glob("*.json")) if d.is_dir() else []


@dataclass
class VersionInfo:
    """One row of ``Registry.list_versions``: read from the version's small files, not hashed."""

    name: str
    number: int
    published: str | None = None
    is_latest: bool = False
    is_production: bool = False
    aliases: list[str] = field(default_factory=list)
    parent: str | None = None
    data_fingerprint: str | None = None
    split: str | None = None
    split_seed: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    metrics_source: str | None = None
    n_files: int = 0
    size: int = 0
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
