"""The architecture, checked: no import cycle inside the project, the CLI is a thin top layer,
and the layers contract covers every part of the PARPO library.

Import edges are read with ``ast`` from every module of the five packages: module-level and
function-local imports both count (a cycle through a lazy import still breaks at run time or
makes a module impossible to read alone); imports under ``if TYPE_CHECKING:`` do not.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("parpo_core", "data_pipelines", "reward_models", "parpo", "serving")
CLI = ROOT / "parpo" / "cli"
#: What a command module must not hold: running servers, threads, traffic simulation.
FORBIDDEN_IN_CLI = (
    "uvicorn",
    "threading",
    "concurrent",
    "multiprocessing",
    "asyncio",
    "httpx",
    "serving.simulate",
)


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import nodes anywhere in ``tree`` except inside ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                stack.extend(child.orelse)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            stack.append(child)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                src = _absolute(node, name, path.name == "__init__.py")
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path (first node repeated at the end), or None."""
    colour = dict.fromkeys(graph, 0)  # 0 new, 1 on the stack, 2 done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        colour[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if colour[m] == 1:
                return [*stack[stack.index(m) :], m]
            if colour[m] == 0 and (found := visit(m)):
                return found
        stack.pop()
        colour[n] = 2
        return None

    for n in sorted(graph):
        if colour[n] == 0 and (found := visit(n)):
            return found
    return None


def test_cycle_finder_finds_a_cycle_and_accepts_a_dag():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_type_checking_imports_do_not_count():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    import y\n"
    )
    assert sorted(a.name for n in runtime_imports(tree) if isinstance(n, ast.Import) for a in n.names) == [
        "y"
    ]


def test_no_import_cycle_in_the_project():
    graph = import_graph()
    assert len(graph) > 150 and "parpo_core.artefacts.registry" in graph
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_cli_modules_parse_call_and_render_only():
    problems = []
    for path in sorted(CLI.glob("*.py")):
        module = f"parpo.cli.{path.stem}"
        for node in runtime_imports(ast.parse(path.read_text())):
            names = [a.name for a in node.names]
            src = node.module if isinstance(node, ast.ImportFrom) else None
            for target in [src] if src else names:
                if target.split(".")[0] in FORBIDDEN_IN_CLI or target.startswith(FORBIDDEN_IN_CLI):
                    problems.append(f"{module} imports {target}")
            if src and src != module:
                problems += [f"{module} imports private {src}.{n}" for n in names if n.startswith("_")]
    assert problems == []


def test_layers_contract_covers_every_part_of_the_library():
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    assert "ignore_imports" not in contract
    layered = {m.strip() for layer in contract["layers"] for m in layer.replace("|", ":").split(":")}
    parts = {
        f"parpo.{p.stem}"
        for p in (ROOT / "parpo").iterdir()
        if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert parts - {"parpo.__init__"} <= layered
