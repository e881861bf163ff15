"""Pointer moves (promote, rollback) and resolving version names."""

from __future__ import annotations

import os

import pytest

from parpo_core.artefacts import Registry, RegistryError, pointers
from tests.plugins.artefacts import publish


def _prod(reg: Registry) -> tuple[str, list[str]]:
    p = reg.pointer("reward", "production")
    return p["version"], p["previous"]


def test_promote_defaults_to_latest_and_rollback_pops(reg: Registry):
    v1, v2, v3 = (publish(reg, tag=t).name for t in "abc")
    assert _prod(reg) == (v1, [])
    assert reg.promote("reward") == v3
    assert _prod(reg) == (v3, [v1])
    assert reg.promote("reward", v2) == v2
    assert _prod(reg) == (v2, [v3, v1])
    assert reg.promote("reward", v2) == v2  # already production: no-op, no duplicate history
    assert _prod(reg) == (v2, [v3, v1])
    assert reg.rollback("reward") == v3
    assert _prod(reg) == (v3, [v1])
    assert reg.rollback("reward") == v1
    assert _prod(reg) == (v1, [])
    with pytest.raises(RegistryError, match=f"production {v1} has no previous production version"):
        reg.rollback("reward")
    assert reg.pointer("reward", "latest")["version"] == v3  # latest never moves on promote/rollback


def test_promote_refuses_a_corrupted_version(reg: Registry):
    publish(reg, tag="a")
    v2 = publish(reg, tag="b")
    (v2.path / "stray.txt").write_text("x")
    with pytest.raises(RegistryError, match=f"reward/{v2.name}: corrupted version"):
        reg.promote("reward")
    assert _prod(reg)[0] != v2.name


def test_resolve_names_numbers_and_aliases(reg: Registry):
    v1, v2 = (publish(reg, tag=t).name for t in "ab")
    assert reg.resolve("reward").name == v1
    assert reg.resolve("reward", "production").name == v1
    assert reg.resolve("reward", "latest").name == v2
    assert reg.resolve("reward", v2).name == v2
    assert reg.resolve("reward", "2").name == v2
    assert reg.resolve("reward", "v000001").name == v1
    # the label a train command prints (`published reward/<name>`) names the version too
    assert reg.resolve("reward", f"reward/{v2}").name == v2
    assert reg.resolve("reward", "reward/production").name == v1
    with pytest.raises(RegistryError, match=rf"no version 'policy/{v2}'"):
        reg.resolve("reward", f"policy/{v2}")
    with pytest.raises(RegistryError, match=rf"no version 'v000005' in .*; nearby: {v2}, {v1}"):
        reg.resolve("reward", "v000005")
    with pytest.raises(RegistryError, match="no version 'best'"):
        reg.resolve("reward", "best")


def test_resolve_without_versions_is_a_clear_error(reg: Registry):
    with pytest.raises(RegistryError, match="no registry here; train and publish a reward model first"):
        reg.resolve("reward")
    publish(reg)
    with pytest.raises(RegistryError, match="no policy versions yet"):
        reg.open("policy")
    with pytest.raises(RegistryError, match="no policy versions yet"):
        reg.rollback("policy")
    assert reg.list_versions("policy") == []


def test_a_broken_pointer_is_reported_and_promote_rewrites_it(reg: Registry):
    v1 = publish(reg).name
    (reg.root / "reward" / "production.json").write_text("{oops")
    with pytest.raises(RegistryError, match="production.json: pointer is not valid JSON"):
        reg.open("reward")
    assert reg.promote("reward", v1) == v1
    assert _prod(reg) == (v1, [])


def test_a_missing_production_pointer_is_not_guessed(reg: Registry):
    v1 = publish(reg).name
    (reg.root / "reward" / "production.json").unlink()
    with pytest.raises(RegistryError, match="no production pointer .* set one with `parpo registry promote"):
        reg.open("reward")
    v2 = publish(reg).name  # a later publish does not guess production either
    with pytest.raises(RegistryError, match="no production pointer"):
        reg.open("reward")
    assert reg.promote("reward", v1) == v1
    assert reg.open("reward").name == v1 and reg.open("reward", "latest").name == v2


BROKEN = [  # (file bytes, the reason a user is told)
    (b"{oops", "not valid JSON at byte 1"),
    (b"\x00\x01\x02garbage", "not valid JSON at byte 0"),
    (b"\xff\xfe{}", "not UTF-8 text"),
    (b"", "not valid JSON at byte 0"),
    (b"[1, 2]", "JSON without a 'version' name"),
    (b'{"version": 3}', "JSON without a 'version' name"),
    (b'{"version": "v000001-20260101T000000Z", "previous": 5}', "JSON whose 'previous' is not a list"),
    (b'{"version": "v000001-20260101T000000Z", "previous": [1]}', "JSON whose 'previous' is not a list"),
]


@pytest.mark.parametrize(("data", "reason"), BROKEN)
def test_promote_rewrites_a_broken_production_pointer(reg: Registry, data: bytes, reason: str):
    v1, v2 = (publish(reg, tag=t).name for t in "ab")
    prod = reg.root / "reward" / "production.json"
    prod.write_bytes(data)
    with pytest.raises(RegistryError, match=f"production.json: pointer is {reason}.*parpo registry promote"):
        reg.open("reward")
    moved = reg.point("reward", "production", "2")
    assert (moved.version, moved.before, moved.changed) == (v2, None, True)
    assert moved.repaired is not None and moved.repaired.reason.startswith(reason)
    assert moved.repaired.head == data[:40] and moved.repaired.size == len(data)
    assert _prod(reg) == (v2, [])  # rewritten whole; the unreadable history is gone
    assert reg.promote("reward", v1) == v1 and _prod(reg) == (v1, [v2])  # and it works as a pointer again


def test_a_broken_pointer_quotes_its_first_bytes_truncated(reg: Registry):
    publish(reg)
    (reg.root / "reward" / "production.json").write_bytes(b"\x00" + b"x" * 99)
    (broken,) = reg.broken_pointers("reward").values()
    assert broken.quote() == "b'\\x00" + "x" * 39 + "'..."  # 40 bytes shown of 100
    assert broken.problem() == "not valid JSON at byte 0, first bytes " + broken.quote()
    big = reg.root / "reward" / "production.json"
    big.write_bytes(b" " * (pointers.MAX_BYTES + 5))
    (broken,) = reg.broken_pointers("reward").values()
    assert (
        broken.reason == f"{pointers.MAX_BYTES + 5:,} bytes, not a pointer (at most {pointers.MAX_BYTES:,})"
    )


def test_the_rewrite_of_a_broken_pointer_is_atomic(reg: Registry, monkeypatch):
    publish(reg)
    prod = reg.root / "reward" / "production.json"
    prod.write_bytes(b"{oops")

    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk gone"):
        reg.promote("reward", "1")
    monkeypatch.undo()
    assert prod.read_bytes() == b"{oops"  # the old bytes, never a half-written file
    assert sorted(p.name for p in prod.parent.iterdir() if p.name.endswith(".tmp")) == []


def test_rollback_on_a_broken_pointer_says_to_promote_and_changes_nothing(reg: Registry):
    publish(reg)
    prod = reg.root / "reward" / "production.json"
    prod.write_bytes(b"\x00garbage")
    with pytest.raises(RegistryError) as e:
        reg.rollback("reward")
    msg = str(e.value)
    assert msg.startswith("reward: cannot roll back production: production.json is not valid JSON at byte 0")
    assert f"`parpo registry promote --registry {reg.root} --kind reward VERSION`" in msg
    assert "\n" not in msg and prod.read_bytes() == b"\x00garbage"


def test_a_folder_where_a_pointer_belongs_is_one_line(reg: Registry):
    publish(reg)
    prod = reg.root / "reward" / "production.json"
    prod.unlink()
    prod.mkdir()
    assert reg.broken_pointers("reward")["production"].reason == "a folder, not a file"
    with pytest.raises(RegistryError, match="production.json is a folder, not a pointer"):
        reg.promote("reward", "1")


def test_broken_latest_and_aliases(reg: Registry):
    v1 = publish(reg).name
    kdir = reg.root / "reward"
    (kdir / "latest.json").write_text("nope")
    (kdir / "staging.json").write_text("nope")
    assert reg.aliases("reward") == {"production": v1}  # the readable ones
    assert sorted(reg.broken_pointers("reward")) == ["latest", "staging"]
    assert [i.aliases for i in reg.list_versions("reward")] == [["production"]]
    with pytest.raises(
        RegistryError, match="latest.json: pointer is not valid JSON.*next publish rewrites it"
    ):
        reg.promote("reward")  # promote's default is latest
    with pytest.raises(RegistryError, match="alias set staging VERSION .*alias rm staging"):
        reg.resolve("reward", "staging")
    v2 = publish(reg).name  # a publish repairs latest
    assert reg.pointer("reward", "latest") == {
        **reg.pointer("reward", "latest"),
        "version": v2,
        "previous": [],
    }
    moved = reg.point("reward", "staging", "1")
    assert moved.version == v1 and moved.repaired is not None and moved.repaired.head == b"nope"
    (kdir / "staging.json").write_text("nope")
    assert reg.remove_alias("reward", "staging") is None and not (kdir / "staging.json").exists()
    with pytest.raises(RegistryError, match="latest is moved by publish only"):
        reg.point("reward", "latest", "1")
