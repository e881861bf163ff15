"""Durable writes: whole files and folders appear at their final path, or nothing does."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from parpo_core.durable import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_with,
    publish_dir,
    sha256_file,
)


def test_atomic_writes_replace_whole_and_leave_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "sub" / "a.json"
    atomic_write_json(p, {"x": 1})
    atomic_write_bytes(p, b"second")
    assert p.read_bytes() == b"second"
    assert sorted(x.name for x in p.parent.iterdir()) == ["a.json"]


def test_a_failing_writer_keeps_the_old_file_and_no_temp(tmp_path: Path) -> None:
    p = tmp_path / "a.txt"
    atomic_write_bytes(p, b"old")

    def half_then_fail(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write_with(p, half_then_fail)
    assert p.read_bytes() == b"old" and [x.name for x in tmp_path.iterdir()] == ["a.txt"]


def test_publish_dir_refuses_an_existing_folder_unless_replacing(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    for i in range(2):
        staging = tmp_path / f"staging{i}"
        (staging / "inner").mkdir(parents=True)
        (staging / "inner" / "f.json").write_text(json.dumps({"i": i}))
        if i == 1:
            with pytest.raises(FileExistsError):
                publish_dir(staging, dest)
            publish_dir(staging, dest, replace=True)
        else:
            publish_dir(staging, dest)
        assert json.loads((dest / "inner" / "f.json").read_text()) == {"i": i}
        assert not staging.exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out"]  # the old folder is gone too


def test_sha256_file_matches_hashlib(tmp_path: Path) -> None:
    p = tmp_path / "blob"
    data = bytes(range(256)) * 5000
    p.write_bytes(data)
    assert sha256_file(p) == hashlib.sha256(data).hexdigest()
