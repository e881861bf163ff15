"""Packaging: presets ship as package data and every package is listed in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("parpo_core", "parpo", "data_pipelines", "reward_models", "serving")
        for p in (ROOT / top).rglob("__init__.py")
    }
    found |= {f"parpo.configs.{d.name}" for d in (ROOT / "configs").iterdir() if any(d.glob("*.yaml"))}
    assert found | {"parpo.configs"} == listed


@pytest.mark.integration
def test_presets_load_after_a_plain_install(tmp_path):
    """A non-editable install (a built wheel) still finds `configs/data/default.yaml`."""
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    code = (
        "import parpo, sys; assert parpo.__file__.startswith(sys.argv[1]), parpo.__file__\n"
        "from parpo.presets import load, preset_names\n"
        "from data_pipelines.data_config import DataConfig\n"
        "print(preset_names('data'), load(DataConfig, 'data', 'default').split.seed)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(target)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['default'] 0"
