"""``parpo registry`` through typer's CliRunner on a small registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

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
    assert res.exit_code == 0 and "no versions in" in res.stdout
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


def _main(*args: str) -> subprocess.CompletedProcess[str]:
    """``parpo`` as a user runs it (main() turns errors into one ``error:`` line)."""
    return subprocess.run(
        [sys.executable, "-m", "parpo.cli.main", *args], capture_output=True, text=True, timeout=120
    )


def test_promote_repairs_a_garbage_pointer_and_rollback_says_to_promote(reg: Registry, three):
    prod = reg.root / "reward" / "production.json"
    prod.write_bytes(b"\x00\x9cgarbage" * 20)
    res = _main("registry", "rollback", "--registry", str(reg.root))
    assert res.returncode == 1 and res.stdout == "", res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith(
        "error: reward: cannot roll back production: production.json is not UTF-8 text"
    )
    assert f"`parpo registry promote --registry {reg.root} --kind reward VERSION`" in res.stderr
    assert prod.read_bytes() == b"\x00\x9cgarbage" * 20  # rollback changed nothing
    res = invoke(reg, "list")  # the versions to choose from are still listed
    assert res.exit_code == 0 and list(_rows(res.stdout)) == three
    assert "warning: " in res.stderr and "production.json: pointer is not UTF-8 text" in res.stderr
    res = invoke(reg, "promote", "2")
    assert res.exit_code == 0, res.output
    head = repr((b"\x00\x9cgarbage" * 20)[:40])
    assert res.stdout.strip() == (
        f"production: reward/{three[1]} (was broken: not UTF-8 text, first bytes {head}...; "
        "rewritten, its rollback history is lost)"
    )
    assert json.loads(prod.read_text())["version"] == three[1]
    assert reg.pointer("reward", "production")["previous"] == []
    res = invoke(reg, "rollback")
    assert isinstance(res.exception, RegistryError) and "has no previous production version" in str(
        res.exception
    )


def test_alias_set_and_rm_repair_a_broken_alias(reg: Registry, three):
    (reg.root / "reward" / "staging.json").write_text("[]")
    res = invoke(reg, "alias", "set", "staging", "3")
    assert res.exit_code == 0, res.output
    assert (
        f"staging: reward/{three[2]} (was broken: JSON without a 'version' name, first bytes b'[]'; rewritten)"
        in (res.stdout)
    )
    (reg.root / "reward" / "staging.json").write_text("[]")
    res = invoke(reg, "alias", "rm", "staging")
    assert res.exit_code == 0 and "removed alias staging (its file was broken)" in res.stdout


def _dead_staging(reg: Registry, name: str, files: dict[str, bytes], age_s: float) -> Path:
    root = reg.root / "reward" / name
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    when = time.time() - age_s
    for p in [*root.rglob("*"), root]:
        os.utime(p, (when, when))
    return root


def test_clean_removes_killed_publishes_only(reg: Registry, three):
    old = _dead_staging(
        reg, ".staging-4242-0123456789ab", {"weights/w.bin": b"w" * 3000, "c.yaml": b"k: v\n"}, 3600
    )
    recent = _dead_staging(reg, ".staging-4243-0123456789ab", {"x": b"x"}, 60)
    with reg.stage("reward") as live:  # a publish in progress, however old it looks
        live.write_bytes("weights/w.bin", b"live")
        res = invoke(reg, "clean", "--dry-run")
        assert res.exit_code == 0, res.output
        lines = res.stdout.splitlines()
        assert "would remove reward/.staging-4242-0123456789ab (2 files, 2.9 KiB)" in lines
        (recent_line,) = [ln for ln in lines if ".staging-4243-" in ln]  # "changed 1 min ago, under ..."
        assert recent_line.startswith("kept reward/.staging-4243-0123456789ab (changed 1")
        assert recent_line.endswith(" min ago, under --older-than 10 min)")
        assert f"kept reward/{live.dir.name} (a running publish holds the lock on its folder)" in lines
        assert lines[-1] == "would remove 1 leftover, would free 2.9 KiB (3,005 bytes)"
        assert old.exists() and recent.exists()  # a dry run removes nothing
        res = invoke(reg, "clean")
        assert res.exit_code == 0, res.output
        assert res.stdout.splitlines()[-1] == "removed 1 leftover, freed 2.9 KiB (3,005 bytes)"
        assert not old.exists() and recent.exists() and live.dir.exists()
        res = invoke(reg, "clean", "--older-than", "30s", "--kind", "reward")
        assert res.stdout.splitlines()[-1] == "removed 1 leftover, freed 1 B" and not recent.exists()
        assert live.dir.exists()
    assert invoke(reg, "clean").stdout.strip() == f"nothing to clean in {reg.root}"
    assert reg.versions("reward") == three
    res = invoke(reg, "clean", "--older-than", "soon")
    assert res.exit_code == 2 and "'soon' is not a duration such as 90s, 10m, 2h or 1d" in res.output
    afile = reg.root / "reward" / "production.json"
    for cmd in ("clean", "list"):
        res = runner.invoke(app, [cmd, "--registry", str(afile)])
        assert isinstance(res.exception, RegistryError)
        assert str(res.exception).startswith(f"{afile} is a file, not a registry folder")
    res = runner.invoke(app, ["clean", "--registry", str(reg.root / "none")])
    assert isinstance(res.exception, RegistryError)
    assert str(res.exception) == f"{reg.root / 'none'}: no registry here"


def test_kind_is_inferred_only_when_one_kind_holds_the_version(reg: Registry):
    r1, r2 = (publish(reg, tag=t).name for t in "rs")
    p1 = publish(reg, kind="policy", tag="p").name
    res = invoke(reg, "show", "2", "--no-verify")  # only reward has a second version
    assert res.exit_code == 0 and f"reward/{r2}" in res.stdout
    assert f"policy/{p1}" in invoke(reg, "show", f"policy/{p1}", "--no-verify").stdout
    res = invoke(reg, "show", "1", "--no-verify")
    assert str(res.exception) == f"'1' names a version of policy and of reward in {reg.root}: pass --kind"
    res = invoke(reg, "promote")  # 'latest' names a version of both kinds: never a silent default
    assert res.exit_code == 1
    assert (
        str(res.exception) == f"'latest' names a version of policy and of reward in {reg.root}: pass --kind"
    )
    assert f"production: reward/{r2}" in invoke(reg, "promote", "--kind", "reward").stdout
    res = invoke(reg, "show", "v000009", "--no-verify")
    assert res.exit_code == 1 and "no kind in" in str(res.exception) and "pass --kind" in str(res.exception)
    rows = json.loads(invoke(reg, "list", "--json").stdout)  # every kind, each row says which
    assert sorted((d["kind"], d["name"]) for d in rows) == [("policy", p1), ("reward", r1), ("reward", r2)]


def test_registry_env_is_read_by_every_command_with_a_registry_option(reg: Registry, monkeypatch):
    from parpo.cli.main import app as main_app

    publish(reg, tag="r")
    monkeypatch.setenv("PARPO_REGISTRY", str(reg.root))
    assert "reward versions in" in runner.invoke(main_app, ["registry", "list"]).stdout
    # commands outside `registry` read it too: the help names it, and the value reaches the command
    for cmd in (["reward", "eval"], ["policy", "eval"], ["policy", "train"], ["eval", "report"], ["serve"]):
        assert "PARPO_REGISTRY" in runner.invoke(main_app, [*cmd, "--help"], env={"COLUMNS": "200"}).stdout, (
            cmd
        )
    res = runner.invoke(main_app, ["reward", "eval", "--data", str(reg.root / "nodata")])
    assert res.exit_code != 0 and "Missing option '--registry'" not in res.output
