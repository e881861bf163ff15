"""``clean_staging``: what killed publishes leave is removed; a publish still running never is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from parpo_core.artefacts import Registry, leftovers, pointers
from tests.plugins.artefacts import lineage, publish

HOUR = 3600.0


def _leftover(reg: Registry, name: str, files: dict[str, bytes], mtime: float | None = None) -> Path:
    """A staging folder as a killed publish leaves it (no process holds its lock)."""
    root = reg.root / "reward" / name
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    root.mkdir(parents=True, exist_ok=True)
    if mtime is not None:
        for p in [*root.rglob("*"), root]:
            os.utime(p, (mtime, mtime))
    return root


def test_dead_and_idle_leftovers_go_fresh_and_locked_ones_stay(reg: Registry):
    v = publish(reg)
    now = 1_000_000.0
    dead = _leftover(
        reg, ".staging-11-aaa", {"weights/model.bin": b"1234567", "config.yaml": b"a: 1\n"}, now - HOUR
    )
    fresh = _leftover(reg, ".staging-12-bbb", {"x": b"abc"}, now - 60)
    tmp = reg.root / "reward" / ".latest.json.0123abcd.tmp"  # a killed pointer write
    tmp.write_bytes(b'{"vers')
    os.utime(tmp, (now - HOUR, now - HOUR))
    with reg.stage("reward") as st:
        st.write_bytes("weights/blob.bin", b"live")
        os.utime(st.dir, (now - HOUR, now - HOUR))  # even an old-looking live one is kept
        os.utime(st.dir / "weights" / "blob.bin", (now - HOUR, now - HOUR))
        os.utime(st.dir / "weights", (now - HOUR, now - HOUR))
        done = reg.clean_staging("reward", older_than=600, now=now)
        removed = {x.path.name: (n, x.files) for x, n in done.removed}
        kept = dict((x.path.name, why) for x, why in done.kept)
        assert removed == {".staging-11-aaa": (7 + 5, 2), ".latest.json.0123abcd.tmp": (6, 1)}
        assert done.freed == 18
        assert kept[".staging-12-bbb"] == "changed 1 min ago, under --older-than 10 min"
        assert kept[st.dir.name] == "a running publish holds the lock on its folder"
        assert not dead.exists() and not tmp.exists() and fresh.exists() and st.dir.exists()
        assert reg.clean_staging("reward", older_than=30, now=now).removed[0][0].path == fresh
        st.lineage = lineage()
        v2 = st.publish()
    assert reg.versions("reward") == [v.name, v2.name]  # versions, pointers and .lock untouched
    assert sorted(p.name for p in (reg.root / "reward").iterdir()) == sorted(
        [".lock", "latest.json", "production.json", v.name, v2.name]
    )
    reg.verify("reward", v2.name)


def test_dry_run_reports_and_removes_nothing(reg: Registry):
    dead = _leftover(reg, ".staging-11-aaa", {"a": b"x" * 2048}, mtime=1.0)
    done = reg.clean_staging("reward", dry_run=True)
    assert [(x.path, n) for x, n in done.removed] == [(dead, 2048)] and done.freed == 2048
    assert (dead / "a").read_bytes() == b"x" * 2048
    assert reg.clean_staging("reward").freed == 2048 and not dead.exists()
    assert reg.clean_staging("reward").removed == []  # nothing left; a second clean is a no-op


def test_a_pointer_temp_file_is_kept_while_the_kind_lock_is_held(reg: Registry):
    publish(reg)
    tmp = reg.root / "reward" / ".production.json.deadbeef.tmp"
    tmp.write_bytes(b"{}")
    os.utime(tmp, (1, 1))
    with pointers.kind_lock(reg.root / "reward"):  # a pointer move in progress
        done = reg.clean_staging("reward", older_than=0)
        assert done.removed == [] and done.kept[0][1] == "a running publish holds the lock on .lock"
    assert reg.clean_staging("reward", older_than=0).removed[0][0].path == tmp and not tmp.exists()


def test_a_publish_releases_its_lock(reg: Registry):
    v = publish(reg)
    fd = leftovers.hold(v.path)  # the folder was the staging folder: its lock must be gone
    assert fd is not None
    leftovers.release(fd)


_PUBLISHER = """
import sys
sys.path.insert(0, {root!r})
from parpo_core.artefacts import Registry
import tests.plugins.artefacts  # registers the kinds
with Registry({reg!r}).stage("reward") as st:
    st.write_bytes("weights/blob.bin", b"half a model")
    print(st.dir, flush=True)
    sys.stdin.read()  # wait here until killed
"""


def test_a_killed_publish_is_locked_while_alive_and_removable_once_killed(reg: Registry):
    code = _PUBLISHER.format(root=str(Path(__file__).parents[3]), reg=str(reg.root))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        staging = Path(proc.stdout.readline().strip())
        assert staging.is_dir() and staging.name.startswith(f".staging-{proc.pid}-")
        done = reg.clean_staging("reward", older_than=0)  # alive: kept however old
        assert done.removed == [] and [x.path for x, _ in done.kept] == [staging]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert staging.is_dir()  # SIGKILL ran no cleanup: the leftover is there
    done = reg.clean_staging("reward", older_than=0)
    assert [(x.path, n) for x, n in done.removed] == [(staging, len(b"half a model"))]
    assert not staging.exists()
