"""``parpo registry`` through typer's CliRunner on a small registry."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from parpo.cli.registry import app
from parpo_core.artefacts import Registry, RegistryError
from tests.plugins.artefacts import publish

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    from parpo.cli.console import console

    monkeypatch.setattr(console, "width", 200)  # CliRunner is not a terminal: rich would use 80


@pytest.fixture
def three(reg: Registry) -> list[str]:
    return [publish(reg, tag=t).name for t in "abc"]


def invoke(reg: Registry, *args: str):
    res = runner.invoke(app, [*args, "--registry", str(reg.root)], catch_exceptions=True)
    return res


def _rows(output: str) -> dict[str, str]:
    """version name -> its table row."""
    return {ln.split("│")[1].strip(): ln for ln in output.splitlines() if "│ v0000" in ln}


def test_list_marks_latest_and_production(reg: Registry, three):
    res = invoke(reg, "list")
    assert res.exit_code == 0, res.output
    rows = _rows(res.stdout)
    assert list(rows) == three
    assert "production" in rows[three[0]] and "latest" not in rows[three[0]]
    assert "latest" in rows[three[2]] and "production" not in rows[three[2]]
    assert "0.5000" in rows[three[1]]  # test ndcg@10
    data = json.loads(invoke(reg, "list", "--json").stdout)
    assert [(d["name"], d["is_production"], d["is_latest"]) for d in data] == [
        (three[0], True, False),
        (three[1], False, False),
        (three[2], False, True),
    ]


def test_promote_without_version_promotes_latest_then_rollback(reg: Registry, three):
    res = invoke(reg, "promote")
    assert res.exit_code == 0, res.output
    assert f"production: reward/{three[2]} (was {three[0]})" in res.stdout
    assert reg.pointer("reward", "production")["version"] == three[2]
    res = invoke(reg, "promote", "2")
    assert res.exit_code == 0 and reg.pointer("reward", "production")["version"] == three[1]
    assert "already production" in invoke(reg, "promote", three[1]).stdout
    res = invoke(reg, "rollback")
    assert res.exit_code == 0, res.output
    assert f"production: reward/{three[2]} (rolled back from {three[1]})" in res.stdout
    assert invoke(reg, "rollback").exit_code == 0
    assert reg.pointer("reward", "production")["version"] == three[0]
    res = invoke(reg, "rollback")
    assert isinstance(res.exception, RegistryError)  # main() prints it as one `error:` line
    assert "no previous production version" in str(res.exception)


def test_show_prints_lineage_metrics_and_files(reg: Registry, three):
    reg.add_eval("reward", three[0], "e" * 64, "temporal", {"k": 10}, {"test": {"ndcg@10": 0.1}})
    res = invoke(reg, "show")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert f"reward/{three[0]} (production)" in out and "sha256 verified" in out
    for word in (
        "lineage",
        "data_fingerprint",
        "temporal (seed 0",
        "metrics",
        "ndcg@10",
        "0.5000",
        "weights/",
    ):
        assert word in out, word
    assert "eeeeeeeeeeeeeeee-temporal-" in out
    d = json.loads(invoke(reg, "show", "latest", "--json").stdout)
    assert d["version"] == three[2] and d["pointers"] == ["latest"]
    assert d["lineage"]["split"]["name"] == "temporal"
    assert d["metrics"]["test"] == {"ndcg@10": 0.5, "recall@10": 0.75}
    assert d["manifest"]["by_folder"]["weights/"]["files"] == 1
    assert d["manifest"]["files"] == 5


def test_errors_are_registry_errors(reg: Registry, three, tmp_path):
    (reg.root / "reward" / three[1] / "stray").write_text("x")
    for args in (("show", "2"), ("verify", "2"), ("show", "v000009"), ("promote", "2")):
        res = invoke(reg, *args)
        assert isinstance(res.exception, RegistryError), (args, res.output)
        assert "\n" not in str(res.exception)
    res = invoke(reg, "show", "2", "--no-verify")
    assert res.exit_code == 0 and "problem: unexpected file stray" in res.stdout
    assert "ok (5 files" in invoke(reg, "verify").stdout
    res = runner.invoke(app, ["list", "--registry", str(tmp_path / "none")])
    assert res.exit_code == 0 and "no reward versions" in res.stdout
    res = runner.invoke(app, ["list", "--registry", str(reg.root), "--kind", "model"])
    assert res.exit_code == 2  # typer rejects an unknown kind before any code runs


def test_cli_module_loads_no_torch(reg: Registry, three):
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from parpo.cli.registry import app\n"
        f"res = CliRunner().invoke(app, ['list', '--registry', {str(reg.root)!r}])\n"
        "assert res.exit_code == 0, res.output\n"
        f"res = CliRunner().invoke(app, ['show', '--registry', {str(reg.root)!r}])\n"
        "assert res.exit_code == 0, res.output\n"
        "print(','.join(m for m in ('torch', 'safetensors', 'polars') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
