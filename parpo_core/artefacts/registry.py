"""The artefact registry: immutable versions of each kind, named pointers, add-only evaluations.

See ``docs/registry.md`` for the layout, the manifest and pointer semantics.
Import-light on purpose (no torch): listing and pointer moves must be fast;
tensors go through ``parpo_core.artefacts.weights`` only when asked for. Kinds are registered
in ``parpo_core.artefacts.kinds`` by the packages that own them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from parpo_core.artefacts import leftovers, manifest, pointers
from parpo_core.artefacts.errors import RegistryError
from parpo_core.artefacts.evals import read_evals, write_eval
from parpo_core.artefacts.kinds import KINDS
from parpo_core.artefacts.layout import (
    EVALS,
    LINEAGE,
    MANIFEST,
    RESERVED,
    check_alias,
    check_kind,
    is_alias_name,
    is_version_name,
    nearby,
    utc_now,
    version_name,
    version_number,
)
from parpo_core.artefacts.leftovers import DEFAULT_OLDER_THAN, Cleaned
from parpo_core.artefacts.lineage import Lineage
from parpo_core.artefacts.pointers import Broken, Moved
from parpo_core.artefacts.stage import Stage, make_read_only
from parpo_core.artefacts.version import Version, VersionInfo
from parpo_core.durable import atomic_write_json, publish_dir

if TYPE_CHECKING:
    from torch import Tensor


class Registry:
    """A registry folder ``REG`` holding ``REG/<kind>/<version>/`` for every registered kind.

    Write with ``stage`` (or ``publish`` for the one-call form), read with
    ``open`` (verified against the manifest), move ``production`` with ``promote``
    and ``rollback`` and other named pointers with ``set_alias``/``remove_alias``,
    record later evaluations with ``add_eval``.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"Registry({str(self.root)!r})"

    def kind_dir(self, kind: str) -> Path:
        return self.root / check_kind(kind)

    # -- writing -----------------------------------------------------------------
    def stage(self, kind: str) -> Stage:
        """A staging context for a new version; see ``parpo_core.artefacts.stage``."""
        return Stage(self, kind)

    def publish(
        self,
        kind: str,
        *,
        lineage: Lineage,
        weights: Mapping[str, Tensor] | None = None,
        config: Any = None,
        metadata: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
        idmaps: Path | str | Mapping[str, Path | str] | None = None,
        logs: Path | str | None = None,
        files: Mapping[str, bytes | str | Path] | None = None,
        write: Callable[[Stage], None] | None = None,
    ) -> Version:
        """Publish a version in one call.

        ``weights`` -> ``weights/model.safetensors``; ``config`` -> ``config.yaml``;
        ``metadata`` -> ``metadata.json``; ``metrics`` -> ``metrics.json``;
        ``idmaps`` -> ``idmaps/``; ``logs`` -> ``logs/metrics.csv``; ``files`` maps a
        path inside the version to ``bytes`` (written as is) or to a file or folder
        path (``str`` or ``Path``, copied), e.g. a policy's ``catalogue/``;
        ``write(stage)`` may add anything else before publish.
        """
        with self.stage(kind) as st:
            if weights is not None:
                st.write_weights(weights)
            if config is not None:
                st.write_config(config)
            if metadata is not None:
                st.write_metadata(metadata)
            if idmaps is not None:
                st.add_idmaps(idmaps)
            if logs is not None:
                st.add_logs(logs)
            for rel, content in (files or {}).items():
                if isinstance(content, bytes):
                    st.write_bytes(rel, content)
                else:
                    st.copy(content, rel)
            if write is not None:
                write(st)
            st.lineage = lineage
            st.metrics = None if metrics is None else dict(metrics)
            return st.publish()

    def commit(self, kind: str, staging: Path) -> Version:
        """Publish the staging folder ``staging`` (from ``Stage``) as the next version of ``kind``:
        hash, name under the lock, write the manifest, fsync and rename (the commit point); then
        move ``latest`` (and ``production`` for the first version of a kind)."""
        files = manifest.build(staging)
        kdir = self.kind_dir(kind)
        with pointers.kind_lock(kdir):
            existing = self._names(kind)
            number = max((version_number(n) or 0 for n in existing), default=0) + 1
            while True:
                name = version_name(number)
                if not (kdir / name).exists():
                    break
                number += 1
            published = utc_now()
            atomic_write_json(
                staging / MANIFEST,
                {
                    "schema_version": manifest.SCHEMA_VERSION,
                    "kind": kind,
                    "version": name,
                    "published": published,
                    "files": files,
                },
            )
            (staging / EVALS).mkdir(exist_ok=True)
            make_read_only(staging)
            publish_dir(staging, kdir / name)  # the commit point
            pointers.move(kdir, kind, "latest", name)
            if not existing and not pointers.path(kdir, "production").exists():  # first of its kind
                pointers.move(kdir, kind, "production", name)
        return Version(kind, name, kdir / name, json.loads((kdir / name / MANIFEST).read_text()))

    # -- names and pointers -----------------------------------------------------
    def _names(self, kind: str) -> list[str]:
        kdir = self.kind_dir(kind)
        if not kdir.is_dir():
            return []
        names = [p.name for p in kdir.iterdir() if p.is_dir() and is_version_name(p.name)]
        return sorted(names, key=lambda n: (version_number(n), n))

    def versions(self, kind: str) -> list[str]:
        """Version names of ``kind`` in publish order (staging folders are never listed)."""
        return self._names(kind)

    def pointer(self, kind: str, which: str) -> dict[str, Any] | None:
        """The JSON of pointer ``which`` (``latest``, ``production`` or an alias), None when not set."""
        return pointers.read(self.kind_dir(kind), which)

    def aliases(self, kind: str) -> dict[str, str]:
        """Every readable pointer of ``kind`` and the version it names (production and latest
        first); ``broken_pointers`` lists the others."""
        kdir = self.kind_dir(kind)
        loaded = {p: pointers.load(kdir, p) for p in pointers.names(kdir)}
        return {p: obj["version"] for p, obj in loaded.items() if isinstance(obj, dict)}

    def broken_pointers(self, kind: str) -> dict[str, Broken]:
        """The pointer files of ``kind`` that cannot be read as pointers (see ``pointers.Broken``)."""
        kdir = self.kind_dir(kind)
        loaded = {p: pointers.load(kdir, p) for p in pointers.names(kdir)}
        return {p: obj for p, obj in loaded.items() if isinstance(obj, Broken)}

    def point(self, kind: str, pointer: str, version: str) -> Moved:
        """Point ``pointer`` (``production`` or an alias; ``latest`` moves on publish only) at
        ``version`` after verifying it. The old target goes onto the pointer's history; a broken
        pointer file is rewritten atomically and returned in ``Moved.repaired``."""
        if check_alias(pointer) == "latest":
            raise RegistryError("latest is moved by publish only; promote or alias a version instead")
        kdir = self.kind_dir(kind)
        with pointers.kind_lock(kdir):
            name = self.resolve(kind, version).name
            self.verify(kind, name)
            return pointers.move(kdir, kind, pointer, name)

    def set_alias(self, kind: str, alias: str, version: str) -> str:
        """Point ``alias`` (not ``latest``/``production``) at ``version`` after verifying it; returns
        the version's name. The old target goes onto the alias's history, as for ``production``."""
        check_alias(alias, settable=True)
        return self.point(kind, alias, version).version

    def remove_alias(self, kind: str, alias: str) -> str | None:
        """Delete ``alias`` (not ``latest``/``production``); returns the version it named (None when
        its file was broken)."""
        check_alias(alias, settable=True)
        kdir = self.kind_dir(kind)
        with pointers.kind_lock(kdir):
            old = pointers.remove(kdir, kind, alias)
        return old["version"] if isinstance(old, dict) else None

    def resolve(self, kind: str, version: str | None = None) -> Path:
        """The folder of ``version`` of ``kind`` (default ``production``).

        ``version`` is a full name, a pointer (``latest``, ``production`` or an alias
        such as ``staging``), or a publish number (``3`` or ``v000003``), each optionally
        prefixed ``<kind>/`` (the label ``parpo ... train`` prints as ``published <label>``).
        """
        kdir = self.kind_dir(kind)
        names = self._names(kind)
        if not names:
            if self.root.exists() and not self.root.is_dir():
                raise RegistryError(f"{self.root} is a file, not a registry folder (REG/<kind>/<version>/)")
            where = "no registry here" if not self.root.exists() else f"no {kind} versions yet"
            raise RegistryError(f"{self.root}: {where}; train and publish a {kind} model first")
        version = (version or "production").removeprefix(f"{kind}/")
        is_pointer = version in RESERVED or (is_alias_name(version) and pointers.path(kdir, version).exists())
        if is_pointer:
            ptr = pointers.read(kdir, version)
            if ptr is None:
                how = "promote" if version == "production" else f"alias set {version}"
                raise RegistryError(
                    f"{kind}: no {version} pointer in {self.root} ({len(names)} versions); "
                    f"set one with `parpo registry {how} --registry {self.root} --kind {kind} VERSION`"
                )
            if ptr["version"] not in names:
                raise RegistryError(
                    f"{kind}: {version}.json points at {ptr['version']}, which is not in {kdir}"
                )
            return kdir / ptr["version"]
        if version in names:
            return kdir / version
        digits = version[1:] if version.startswith("v") else version
        if digits.isdigit():
            hits = [n for n in names if version_number(n) == int(digits)]
            if hits:
                return kdir / hits[0]
        near = ", ".join(nearby(version, names))
        raise RegistryError(f"{kind}: no version {version!r} in {self.root}; nearby: {near}")

    def promote(self, kind: str, version: str | None = None) -> str:
        """Point ``production`` at ``version`` (default: ``latest``) after verifying it; returns its name.

        Promoting the current production version is a no-op; a broken ``production.json`` is
        rewritten (``point`` says what it held).
        """
        return self.point(kind, "production", version or "latest").version

    def rollback(self, kind: str) -> str:
        """Point ``production`` back at the previous production version (verified); returns its name."""
        return self.pop(kind, "production").version

    def pop(self, kind: str, pointer: str = "production") -> Moved:
        """Point ``pointer`` back at the version it named before (verified): ``rollback`` with what moved.

        A broken pointer file has no history: a one-line RegistryError says to ``promote`` a version.
        """
        kdir = self.kind_dir(kind)
        with pointers.kind_lock(kdir):
            ptr = pointers.load(kdir, pointer)
            if ptr is None and not self._names(kind):
                self.resolve(kind)  # the clearer error when there are no versions at all
            if isinstance(ptr, dict) and ptr.get("previous"):
                self.verify(kind, self.resolve(kind, ptr["previous"][0]).name)
            return pointers.pop(kdir, kind, pointer)

    # -- reading -----------------------------------------------------------------
    def open(
        self, kind: str, version: str | None = None, *, verify: bool = True, check: bool = True
    ) -> Version:
        """Open ``version`` (default ``production``).

        With ``verify`` every file's sha256 is checked against the manifest; without
        it only presence and sizes are (``check=False`` skips even that, to inspect
        a broken version). Any difference is a one-line RegistryError naming the
        version and its first problem.
        """
        path = self.resolve(kind, version)
        label = f"{kind}/{path.name}"
        m = manifest.read(path, label)
        if m.get("version") not in (None, path.name) or m.get("kind") not in (None, kind):
            raise RegistryError(
                f"{label}: manifest says {m.get('kind')}/{m.get('version')}; the folder was renamed or copied"
            )
        found = manifest.problems(path, m["files"], hashes=verify) if check else []
        if found:
            more = f" (and {len(found) - 1} more problems)" if len(found) > 1 else ""
            raise RegistryError(f"{label}: corrupted version: {found[0]}{more}")
        return Version(kind, path.name, path, m)

    def problems(self, kind: str, version: str | None = None, *, hashes: bool = True) -> list[str]:
        """Every difference between ``version`` and its manifest (empty when intact)."""
        path = self.resolve(kind, version)
        try:
            m = manifest.read(path, f"{kind}/{path.name}")
        except RegistryError as e:
            return [str(e).split(": ", 1)[-1]]
        return manifest.problems(path, m["files"], hashes=hashes)

    def verify(self, kind: str, version: str | None = None) -> Version:
        """Recompute every hash of ``version``; RegistryError naming the first problem."""
        return self.open(kind, version, verify=True)

    def list_versions(self, kind: str) -> list[VersionInfo]:
        """Every version of ``kind`` in publish order with pointers, lineage and the key metrics its
        ``KindSpec`` names.

        Cheap: reads the small JSON files and checks presence and sizes, without hashing.
        """
        kdir = self.kind_dir(kind)
        spec = KINDS[kind]
        named = self.aliases(kind)
        out = []
        for name in self._names(kind):
            path = kdir / name
            marks = [a for a, v in named.items() if v == name]
            info = VersionInfo(
                name=name,
                number=version_number(name) or 0,
                is_latest="latest" in marks,
                is_production="production" in marks,
                aliases=marks,
            )
            try:
                m = manifest.read(path, f"{kind}/{name}")
                info.published = m.get("published")
                info.n_files = len(m["files"])
                info.size = sum(int(e.get("size", 0)) for e in m["files"].values())
                found = manifest.problems(path, m["files"], hashes=False)
                if found:
                    info.problem = found[0]
                lineage = json.loads((path / LINEAGE).read_text())
                info.parent = lineage.get("parent")
                info.data_fingerprint = lineage.get("data_fingerprint")
                info.split = (lineage.get("split") or {}).get("name")
                info.split_seed = (lineage.get("split") or {}).get("seed")
                info.metrics, info.metrics_source = spec.read_metrics(path)
            except RegistryError as e:
                info.problem = str(e).split(": ", 1)[-1]
            except (OSError, ValueError, AttributeError) as e:
                info.problem = f"unreadable ({e.__class__.__name__})"
            out.append(info)
        return out

    # -- evaluations and housekeeping -------------------------------------------
    def add_eval(
        self,
        kind: str,
        version: str | None,
        data_fingerprint: str,
        split: str,
        eval_config: dict[str, Any],
        result: dict[str, Any],
    ) -> Path:
        """Record an evaluation of ``version`` as ``evals/<fp[:16]>-<split>-<config-hash[:12]>.json``.

        Identical re-runs are no-ops; a different result for the same name is a
        RegistryError (add-only). The manifest is not touched.
        """
        v = self.open(kind, version, verify=False)
        return write_eval(v.path, v.label, data_fingerprint, split, eval_config, result)

    def evals(self, kind: str, version: str | None = None) -> list[dict[str, Any]]:
        """The evaluations recorded for ``version``, sorted by file name."""
        return read_evals(self.resolve(kind, version))

    def clean_staging(
        self,
        kind: str,
        *,
        older_than: float = DEFAULT_OLDER_THAN,
        dry_run: bool = False,
        now: float | None = None,
    ) -> Cleaned:
        """Remove what killed publishes left in ``REG/<kind>/`` (staging folders, pointer temp
        files): those no live process holds locked and that have not changed for ``older_than``
        seconds (the rule is in ``parpo_core.artefacts.leftovers``). ``dry_run`` removes nothing."""
        return leftovers.clean(self.kind_dir(kind), older_than=older_than, dry_run=dry_run, now=now)
