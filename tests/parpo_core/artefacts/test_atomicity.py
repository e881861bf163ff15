"""Crash safety and concurrency: a failed publish leaves nothing; racing publishes get distinct names."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path

import pytest

from parpo_core.artefacts import Registry
from tests.plugins.artefacts import lineage, publish


def _snapshot(reg: Registry, kind: str = "reward") -> dict[str, object]:
    kdir = reg.root / kind
    return {
        "versions": reg.versions(kind),
        "pointers": {p: reg.pointer(kind, p) for p in ("latest", "production")},
        "entries": sorted(p.name for p in kdir.iterdir()) if kdir.exists() else [],
    }


def test_exception_inside_stage_leaves_no_version(reg: Registry):
    publish(reg)
    before = _snapshot(reg)
    with pytest.raises(RuntimeError, match="training blew up"), reg.stage("reward") as st:
        st.write_bytes("weights/blob.bin", b"half")
        st.lineage = lineage()
        raise RuntimeError("training blew up")
    assert _snapshot(reg) == before


def test_crash_at_the_rename_leaves_no_version_and_no_pointer_change(reg: Registry, monkeypatch):
    publish(reg)
    before = _snapshot(reg)

    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "rename", boom)
    with pytest.raises(OSError, match="disk gone"):
        publish(reg, tag="second")
    monkeypatch.undo()
    assert _snapshot(reg) == before  # staging folder removed too
    assert publish(reg, tag="third").name.startswith("v000002-")


def test_a_leftover_staging_folder_is_never_a_version(reg: Registry):
    v = publish(reg)
    # What a killed process leaves: a staging folder with files but no rename.
    dead = reg.root / "reward" / ".staging-999999999-abc"
    (dead / "weights").mkdir(parents=True)
    (dead / "weights" / "blob.bin").write_bytes(b"partial")
    assert reg.versions("reward") == [v.name]
    assert [i.name for i in reg.list_versions("reward")] == [v.name]
    os.utime(dead / "weights" / "blob.bin", (1, 1))  # killed long ago: nothing changed since
    os.utime(dead / "weights", (1, 1))
    os.utime(dead, (1, 1))
    with reg.stage("reward") as st:  # a publish in progress: locked, kept whatever its age
        st.write_bytes("weights/blob.bin", b"live")
        done = reg.clean_staging("reward", older_than=0)
        assert [(x.path, n) for x, n in done.removed] == [(dead, len(b"partial"))]
        assert [x.path for x, _ in done.kept] == [st.dir]
        assert st.dir.exists() and not dead.exists()


def _publish_many(root: str, tag: str, n: int, queue) -> None:
    reg = Registry(root)
    queue.put([publish(reg, tag=f"{tag}{i}").name for i in range(n)])


def test_concurrent_publishes_get_distinct_names(tmp_path: Path):
    root = str(tmp_path / "REG")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_publish_many, args=(root, tag, 5, queue)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    got = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    names = [n for part in got for n in part]
    assert len(set(names)) == 10
    reg = Registry(root)
    assert sorted(names) == reg.versions("reward")
    assert [int(n[1:7]) for n in reg.versions("reward")] == list(range(1, 11))
    for part in got:  # each process saw its own publishes in increasing order
        assert part == sorted(part)
    for n in names:
        reg.verify("reward", n)
    latest = reg.pointer("reward", "latest")
    assert latest["version"] == reg.versions("reward")[-1]
    assert [latest["version"], *latest["previous"]] == reg.versions("reward")[::-1]
    prod = json.loads((tmp_path / "REG" / "reward" / "production.json").read_text())
    assert prod["version"] == reg.versions("reward")[0] and prod["previous"] == []
