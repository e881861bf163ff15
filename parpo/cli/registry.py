"""``parpo registry``: list versions, show one, promote, roll back, set and remove aliases,
clean up what killed publishes left.

Imports ``parpo_core.artefacts`` inside each command (never torch), so
listing a registry starts fast.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from parpo.cli.console import REGISTRY_ENV

if TYPE_CHECKING:
    from parpo_core.artefacts import Registry, VersionInfo

from parpo_core.artefacts.kinds import KINDS

app = typer.Typer(
    help="Inspect the artefact registry (REG/<kind>/<version>/) and move its pointers.",
    no_args_is_help=True,
)
alias_app = typer.Typer(
    help="Named pointers beside latest/production (staging, challenger, ...): set and remove.",
    no_args_is_help=True,
)
app.add_typer(alias_app, name="alias")

#: The registered artefact kinds (``reward``, ``policy``, and any a plugin registers).
Kind = StrEnum("Kind", {name: name for name in KINDS.names()})


RegistryOpt = Annotated[
    Path,
    typer.Option("--registry", "-r", help="Registry folder (REG).", envvar=REGISTRY_ENV),
]
KindOpt = Annotated[
    Kind | None,
    typer.Option(
        "--kind", "-k", help="Which artefacts (default: the one kind holding the version, if only one does)."
    ),
]
VersionArg = Annotated[
    str | None,
    typer.Argument(help="A version name, its number (3 or v000003), 'latest', 'production' or an alias."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _registry(path: Path) -> Registry:
    from parpo_core.artefacts import Registry, RegistryError

    if path.exists() and not path.is_dir():
        raise RegistryError(f"{path} is a file, not a registry folder (REG/<kind>/<version>/)")
    return Registry(path)


def _kind(reg: Registry, kind: Kind | None, version: str | None) -> str:
    """``--kind`` as given, else the one kind that holds ``version`` (default ``production``).
    Pointers and numbers name a version in every kind that has one, so they need ``--kind``
    as soon as two kinds do: one line listing them, never a silent default."""
    from parpo_core.errors import UserError

    if kind is not None:
        return kind.value
    target = version or "production"
    holders = []
    for k in KINDS.names():
        try:
            reg.resolve(k, target)
        except UserError:
            # a broken pointer file still names its kind: the command then reports or repairs it
            if not (reg.kind_dir(k) / f"{target}.json").is_file():
                continue
        holders.append(k)
    if len(holders) == 1:
        return holders[0]
    from parpo_core.artefacts import RegistryError

    if not holders:
        raise RegistryError(
            f"no kind in {reg.root} holds {target!r}; pass --kind ({', '.join(KINDS.names())})"
        )
    raise RegistryError(
        f"{target!r} names a version of {' and of '.join(holders)} in {reg.root}: pass --kind"
    )


def _kinds(reg: Registry, kind: Kind | None) -> list[str]:
    """``--kind`` as given, else every kind that has versions."""
    return [kind.value] if kind is not None else [k for k in KINDS.names() if reg.versions(k)]


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _markers(info: VersionInfo) -> str:
    return ", ".join(info.aliases)


@app.command("list")
def list_(registry: RegistryOpt, kind: KindOpt = None, as_json: JsonOpt = False) -> None:
    """List versions in publish order with their pointers, data and the kind's key metrics
    (reward: test ranking metrics; policy: its newest evaluation, else its training means);
    every kind that has versions unless --kind names one. JSON rows carry their ``kind``."""
    from parpo.cli.console import console, err
    from parpo_core.artefacts.pointers import error

    reg = _registry(registry)
    kinds = _kinds(reg, kind)
    rows = []
    for k in kinds:
        infos = reg.list_versions(k)
        for name, broken in reg.broken_pointers(k).items():
            err.print(f"warning: {error(broken, reg.kind_dir(k), name)}", soft_wrap=True, markup=False)
        rows += [{"kind": k, **i.to_dict()} for i in infos]
        if not as_json:
            if infos:
                console.print(_versions_table(registry, k, infos))
            else:
                console.print(f"no {k} versions in {registry}", soft_wrap=True)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    elif not kinds:
        console.print(f"no versions in {registry}", soft_wrap=True)


def _versions_table(registry: Path, kind: str, infos: list[VersionInfo]) -> Any:
    from rich.table import Table

    columns = KINDS[kind].columns
    t = Table(title=f"{kind} versions in {registry}", title_justify="left")
    for col, justify in (
        ("version", "left"),
        ("pointers", "left"),
        ("published", "left"),
        ("parent", "left"),
        ("data", "left"),
        ("split", "left"),
        *((c, "right") for c in columns),
        ("metrics from", "left"),
        ("status", "left"),
    ):
        t.add_column(col, justify=justify, no_wrap=col in ("version", "pointers", "published", "parent"))
    for i in infos:
        t.add_row(
            f"[bold]{i.name}[/]" if i.is_production else i.name,
            _markers(i),
            i.published or "-",
            i.parent.split("-", 1)[0] if i.parent else "-",
            (i.data_fingerprint or "-")[:12],
            f"{i.split}/{i.split_seed}" if i.split else "-",
            *(f"{i.metrics[k]:.4f}" if k in i.metrics else "-" for k in columns),
            i.metrics_source or "-",
            f"[red]{i.problem}[/]" if i.problem else "ok",
        )
    return t


@app.command()
def history(registry: RegistryOpt, as_json: JsonOpt = False) -> None:
    """The chain of versions of every kind: parents, data fingerprints, gate decisions of the
    retrains that produced them (`parpo retrain`) and key metrics."""
    from rich.table import Table

    from parpo.cli.console import console
    from parpo.retrain.history import history as chain

    if not registry.is_dir():
        from parpo_core.artefacts import RegistryError

        raise RegistryError(f"{registry}: no registry here")
    rows = chain(registry)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    t = Table(title=f"history of {registry}", title_justify="left")
    for col in ("kind", "version", "pointers", "parent", "data", "gate", "key metrics"):
        t.add_column(col, no_wrap=col in ("version", "parent"))
    for r in rows:
        gate = r["gate"]["status"] if r["gate"] else "-"
        metrics = "  ".join(f"{k} {v:.4f}" for k, v in r["metrics"].items())
        t.add_row(
            r["kind"],
            r["version"].split("-", 1)[0],
            ", ".join(r["pointers"]),
            r["parent"].split("-", 1)[0] if r["parent"] else "-",
            (r["data_fingerprint"] or "-")[:12],
            gate,
            metrics or "-",
        )
    console.print(t)


def _show_dict(reg: Registry, kind: str, version: str | None, verify: bool) -> dict[str, Any]:
    v = reg.open(kind, version, verify=verify, check=verify)
    files = v.manifest["files"]
    pointers = {p: target == v.name for p, target in reg.aliases(kind).items()}
    return {
        "kind": kind,
        "version": v.name,
        "path": str(v.path),
        "published": v.published,
        "pointers": [p for p, on in pointers.items() if on],
        "verified": verify,
        "problems": [] if verify else reg.problems(kind, v.name, hashes=False),
        "lineage": v.lineage.model_dump(mode="json"),
        "metrics": v.metrics,
        "manifest": {
            "files": len(files),
            "bytes": sum(int(e["size"]) for e in files.values()),
            "by_folder": _by_folder(files),
        },
        "evals": [e["file"] for e in reg.evals(kind, v.name)],
    }


def _by_folder(files: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for rel, e in sorted(files.items()):
        top = rel.split("/", 1)[0] + "/" if "/" in rel else rel
        slot = out.setdefault(top, {"files": 0, "bytes": 0})
        slot["files"] += 1
        slot["bytes"] += int(e["size"])
    return out


@app.command()
def show(
    registry: RegistryOpt,
    version: VersionArg = None,
    kind: KindOpt = None,
    verify: Annotated[
        bool, typer.Option("--verify/--no-verify", help="Check every file's sha256 against the manifest.")
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """Show a version (default: production): lineage, metrics, files and evaluations."""
    from rich.table import Table

    from parpo.cli.console import console

    reg = _registry(registry)
    kname = _kind(reg, kind, version)
    d = _show_dict(reg, kname, version, verify)
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return
    marks = f" ({', '.join(d['pointers'])})" if d["pointers"] else ""
    state = "sha256 verified" if verify else "[yellow]not verified[/]"
    console.print(
        f"[bold]{kname}/{d['version']}[/]{marks}  published {d['published']}  {state}", soft_wrap=True
    )
    console.print(f"  {d['path']}", soft_wrap=True)
    for problem in d["problems"]:
        console.print(f"  [red]problem[/]: {problem}", soft_wrap=True)
    lin = Table(title="lineage", show_header=False, title_justify="left")
    lin.add_column("key", style="bold")
    lin.add_column("value")
    for k, val in d["lineage"].items():
        if k == "split":
            pos = json.dumps(val.get("positives") or {}, sort_keys=True)
            val = f"{val['name']} (seed {val['seed']}, positives {pos})"
        elif isinstance(val, dict):
            val = json.dumps(val, sort_keys=True) if val else "-"
        lin.add_row(k, "-" if val is None else str(val))
    console.print(lin)
    if d["metrics"]:
        sections = [s for s, m in d["metrics"].items() if isinstance(m, dict)]
        names = sorted({k for s in sections for k in d["metrics"][s]})
        mt = Table(title=f"metrics ({d['metrics'].get('split')}, seed {d['metrics'].get('seed')})")
        mt.title_justify = "left"
        mt.add_column("metric", style="bold")
        for s in sections:
            mt.add_column(s, justify="right")
        for n in names:
            mt.add_row(n, *(_fmt(d["metrics"][s].get(n)) for s in sections))
        console.print(mt)
    else:
        console.print("metrics: none recorded at publish")
    ft = Table(
        title=f"files ({d['manifest']['files']}, {_size(d['manifest']['bytes'])})", title_justify="left"
    )
    ft.add_column("path", style="bold")
    ft.add_column("files", justify="right")
    ft.add_column("size", justify="right")
    for top, s in d["manifest"]["by_folder"].items():
        ft.add_row(top, str(s["files"]), _size(s["bytes"]))
    console.print(ft)
    console.print(f"evals: {', '.join(d['evals']) if d['evals'] else 'none'}", soft_wrap=True)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return "-" if v is None else str(v)


@app.command()
def promote(registry: RegistryOpt, version: VersionArg = None, kind: KindOpt = None) -> None:
    """Verify a version and make it production (default: latest); rewrites a broken production.json."""
    from parpo.cli.console import console

    reg = _registry(registry)
    kname = _kind(reg, kind, version or "latest")
    moved = reg.point(kname, "production", version or "latest")
    if moved.repaired is not None:
        was = f"was broken: {moved.repaired.problem()}; rewritten, its rollback history is lost"
    elif not moved.changed:
        console.print(f"{kname}/{moved.version} is already production", soft_wrap=True)
        return
    else:
        was = f"was {moved.before or 'unset'}"
    console.print(f"production: {kname}/{moved.version} ({was})", soft_wrap=True, markup=False)


@app.command()
def rollback(registry: RegistryOpt, kind: KindOpt = None) -> None:
    """Point production back at the version that was production before."""
    from parpo.cli.console import console

    reg = _registry(registry)
    kname = _kind(reg, kind, "production")
    moved = reg.pop(kname, "production")
    console.print(f"production: {kname}/{moved.version} (rolled back from {moved.before})", soft_wrap=True)


@app.command()
def verify(registry: RegistryOpt, version: VersionArg = None, kind: KindOpt = None) -> None:
    """Recompute every file's sha256 (default: production); one error line on the first problem."""
    from parpo.cli.console import console

    reg = _registry(registry)
    v = reg.verify(_kind(reg, kind, version), version)
    console.print(f"{v.label}: ok ({len(v.manifest['files'])} files match manifest.json)", soft_wrap=True)


@alias_app.command("set")
def alias_set(
    name: Annotated[str, typer.Argument(help="Alias name: [a-z][a-z0-9_-]*, not latest/production.")],
    version: Annotated[str, typer.Argument(help="A version name, its number, or another pointer.")],
    registry: RegistryOpt,
    kind: KindOpt = None,
) -> None:
    """Verify VERSION and point alias NAME at it (its previous target is kept in its history)."""
    from parpo.cli.console import console
    from parpo_core.artefacts.layout import check_alias

    check_alias(name, settable=True)
    reg = _registry(registry)
    kname = _kind(reg, kind, version)
    moved = reg.point(kname, name, version)
    was = (
        f"was broken: {moved.repaired.problem()}; rewritten"
        if moved.repaired
        else f"was {moved.before or 'unset'}"
    )
    console.print(f"{name}: {kname}/{moved.version} ({was})", soft_wrap=True, markup=False)


@alias_app.command("rm")
def alias_rm(
    name: Annotated[str, typer.Argument(help="The alias to remove (not latest/production).")],
    registry: RegistryOpt,
    kind: KindOpt = None,
) -> None:
    """Remove alias NAME (the version it named stays in the registry)."""
    from parpo.cli.console import console

    reg = _registry(registry)
    kname = _kind(reg, kind, name)
    target = reg.remove_alias(kname, name)
    named = f"it named {kname}/{target}" if target else "its file was broken"
    console.print(f"removed alias {name} ({named})", soft_wrap=True)


@app.command()
def export(
    registry: RegistryOpt,
    mlflow: Annotated[
        str,
        typer.Option(
            "--mlflow", help="MLflow tracking/registry URI with a database: sqlite:///reg.db, http://host"
        ),
    ],
    kind: Annotated[
        Kind | None, typer.Option("--kind", "-k", help="Only this kind (default: every kind).")
    ] = None,
) -> None:
    """Mirror versions into an MLflow model registry (parpo-<kind>; pointers as aliases, lineage as
    tags, metrics on a run); the folder registry stays the source of truth. Idempotent."""
    from parpo.cli.console import console
    from parpo_core.artefacts.mlflow_export import export_kind

    reg = _registry(registry)
    kinds = _kinds(reg, kind)
    if not kinds:
        console.print(f"no versions in {registry}", soft_wrap=True)
    for k in kinds:
        done = export_kind(reg, k, mlflow)
        aliases = ", ".join(f"{a} -> {v}" for a, v in done.aliases.items()) or "none"
        console.print(
            f"{done.model}: {len(done.new)} exported, {done.kept} already there; aliases {aliases}",
            soft_wrap=True,
            markup=False,
        )


def _duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``2h``, ``1d`` -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if m is None:
        raise typer.BadParameter(f"{text!r} is not a duration such as 90s, 10m, 2h or 1d")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@app.command()
def clean(
    registry: RegistryOpt,
    kind: Annotated[
        Kind | None, typer.Option("--kind", "-k", help="Only this kind (default: every kind).")
    ] = None,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            help="Only leftovers unchanged for this long (90s, 10m, 2h, 1d); locked ones are always kept.",
        ),
    ] = "10m",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")
    ] = False,
) -> None:
    """Remove what killed publishes left behind (.staging-* folders, pointer temp files).

    A leftover goes only when no running process holds its lock (a publish locks its staging
    folder until it finishes) and nothing in it changed for --older-than; see docs/registry.md.
    """
    from parpo.cli.console import console
    from parpo_core.artefacts import RegistryError

    seconds = _duration(older_than)
    reg = _registry(registry)
    if not registry.is_dir():
        raise RegistryError(f"{registry}: no registry here")
    kinds = [kind.value] if kind is not None else list(KINDS.names())
    verb = "would remove" if dry_run else "removed"
    freed = n = 0
    for k in kinds:
        done = reg.clean_staging(k, older_than=seconds, dry_run=dry_run)
        for x, size in done.removed:
            files = "1 file" if x.files == 1 else f"{x.files} files"
            console.print(f"{verb} {k}/{x.path.name} ({files}, {_size(size)})", soft_wrap=True)
        for x, why in done.kept:
            console.print(f"kept {k}/{x.path.name} ({why})", soft_wrap=True, markup=False)
        freed += done.freed
        n += len(done.removed)
    if n == 0:
        console.print(f"nothing to clean in {registry}", soft_wrap=True)
        return
    total = _size(freed) if freed < 1024 else f"{_size(freed)} ({freed:,} bytes)"
    what = "leftover" if n == 1 else "leftovers"
    console.print(f"{verb} {n} {what}, {'would free' if dry_run else 'freed'} {total}", soft_wrap=True)
