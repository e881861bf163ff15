"""The segment writer as a state machine: a unit is stored whole or not at all, a failed
write never surfaces later, the writer survives every OSError and notices recovery."""

from __future__ import annotations

import asyncio
import errno
import time

import pytest

from serving.segments import SegmentLog, read_records
from tests.serving.helpers import FaultyDisk


def _log(folder, failures=None):
    return SegmentLog(folder, commit_interval_ms=0, segment_bytes=1 << 20, probe_s=0.02,
                      on_failure=None if failures is None else (lambda n, e: failures.append((n, e.errno))))  # fmt: skip


def test_a_failed_write_mid_unit_is_cut_back_and_never_surfaces(tmp_path, monkeypatch):
    """Point 6: on a full disk half a commit reached the file; it answered an error, so after
    space returns none of it may be read back (nor flushed later from a buffer)."""
    disk = FaultyDisk(tmp_path).install(monkeypatch)
    failures: list[tuple[int, int]] = []

    async def main() -> None:
        log = _log(tmp_path, failures)
        await log.append([{"n": 1}])
        disk.error, disk.partial = errno.ENOSPC, True
        with pytest.raises(OSError) as e:
            await log.append([{"n": 2, "pad": "x" * 5000}, {"n": 3}])  # one unit: both or neither
        assert e.value.errno == errno.ENOSPC and not log.healthy and "No space left" in (log.last_error or "")
        disk.error = None
        await log.append([{"n": 4}])
        assert log.healthy and log.last_error is None
        log.close()

    asyncio.run(main())
    assert [r["n"] for r in read_records(tmp_path)] == [1, 4]
    assert failures == [(2, errno.ENOSPC)]
    assert b"xxxx" not in b"".join(p.read_bytes() for p in tmp_path.glob("*.jsonl"))


def test_the_writer_survives_a_folder_it_cannot_open_and_probes_until_it_can(tmp_path, monkeypatch):
    """Point 4: a read-only events folder used to kill the writer thread, and every later
    append hung. Now each append fails at once, the log reports why, and a probe notices when
    writes work again without any traffic."""
    disk = FaultyDisk(tmp_path).install(monkeypatch)
    disk.error = errno.EROFS

    async def main() -> None:
        log = _log(tmp_path)
        for _ in range(3):
            start = time.monotonic()
            with pytest.raises(OSError):
                await asyncio.wait_for(log.append([{"n": 1}]), 30)
            assert time.monotonic() - start < 30
        assert not log.healthy and "Read-only file system" in log.last_error
        assert log._thread.is_alive()
        disk.error = None
        deadline = time.monotonic() + 30  # a broken probe fails the test, never hangs it
        while not log.healthy:  # the probe, with nothing appended
            assert time.monotonic() < deadline, log.last_error
            await asyncio.sleep(0.01)
        await log.append([{"n": 2}])
        log.close()

    asyncio.run(main())
    assert [r["n"] for r in read_records(tmp_path)] == [2]
    assert not list(tmp_path.glob(".probe-*"))  # the probe's scratch file is gone


def test_not_json_is_refused_before_anything_is_queued(tmp_path):
    async def main() -> None:
        log = _log(tmp_path)
        with pytest.raises(ValueError):
            log.append([{"n": 1}, {"x": float("nan")}])
        await log.append([{"n": 2}])
        log.close()

    asyncio.run(main())
    assert [r["n"] for r in read_records(tmp_path)] == [2]
