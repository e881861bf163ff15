"""Run folders: rank 0 picks one; ranks a DDP launcher starts later find the same one."""

from __future__ import annotations

from pathlib import Path

import pytest

from parpo_core.runs import resolve_run_dir, run_dir_env


def test_rank_zero_exports_its_folder_and_a_later_rank_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv(run_dir_env("policy"), raising=False)
    fresh = resolve_run_dir("policy")
    assert fresh.parent == Path("runs") and fresh.name.startswith("policy-")
    chosen = resolve_run_dir("policy", tmp_path / "run")
    assert chosen == tmp_path / "run"
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert resolve_run_dir("policy") == (tmp_path / "run").resolve()
    assert resolve_run_dir("reward") != (tmp_path / "run").resolve()  # one variable per kind
