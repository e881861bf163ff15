"""``parpo serve`` refuses a bad --events or --registry path with one line, before serving."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from parpo.cli.main import app
from parpo_core.artefacts import Registry
from parpo_core.errors import UserError
from tests.plugins.artefacts import lineage, publish


@pytest.fixture
def served(reg: Registry, tmp_path: Path) -> tuple[Registry, Path]:
    """A registry with a (fake) policy version, so only the path check can stop the start."""
    publish(reg, "policy", tag="p", lineage=lineage(reward=None))
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    return reg, afile


def test_events_inside_a_file_is_one_line_before_the_server_starts(served):
    reg, afile = served
    res = subprocess.run(
        [sys.executable, "-m", "parpo.cli.main", "serve", "-r", str(reg.root), "--events", str(afile / "ev"),
         "--port", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert res.stderr == f"error: --events {afile / 'ev'} is inside {afile}, which is a file; give a folder\n"
    assert res.stdout == ""  # the "serving ..." banner never printed: nothing started


@pytest.mark.parametrize(
    ("flag", "sub", "message"),
    [
        ("--events", "", "--events {p} is a file; give a folder"),
        ("--events", "a/b", "--events {p} is inside {f}, which is a file; give a folder"),
        ("--registry", "", "--registry {p} is a file; give a folder"),
        ("--registry", "REG", "--registry {p} is inside {f}, which is a file; give a folder"),
    ],
)
def test_a_file_where_a_folder_belongs(served, tmp_path, flag, sub, message):
    reg, afile = served
    p = afile / sub if sub else afile
    args = {"--registry": str(reg.root), "--events": str(tmp_path / "ev"), flag: str(p)}
    res = CliRunner().invoke(app, ["serve", *(x for kv in args.items() for x in kv)])
    assert isinstance(res.exception, UserError)
    assert str(res.exception) == message.format(p=p, f=afile)
    assert not (tmp_path / "ev").exists()  # refused before anything was created
