"""Pointer moves (promote, rollback) and resolving version names."""

from __future__ import annotations

import pytest

from parpo_core.artefacts import Registry, RegistryError
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
