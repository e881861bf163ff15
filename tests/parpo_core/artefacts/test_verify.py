"""A corrupted or incomplete version fails to load with one line naming it and the first problem."""

from __future__ import annotations

import os
import shutil

import pytest

from parpo_core.artefacts import Registry, RegistryError
from tests.plugins.artefacts import publish


def _writable(path):
    os.chmod(path, 0o644)
    return path


def test_intact_version_verifies(reg: Registry):
    v = publish(reg)
    assert reg.verify("reward").name == v.name


def test_a_changed_byte_is_detected(reg: Registry):
    v = publish(reg)
    p = _writable(v.path / "weights" / "blob.bin")
    data = bytearray(p.read_bytes())
    data[3] ^= 0x01  # same size, different content
    p.write_bytes(bytes(data))
    with pytest.raises(RegistryError) as e:
        reg.open("reward", v.name)
    msg = str(e.value)
    assert "\n" not in msg
    assert (
        msg
        == f"reward/{v.name}: corrupted version: changed file weights/blob.bin (sha256 differs from the manifest)"
    )
    # the cheap check (sizes only) cannot see it, the full one can
    assert reg.open("reward", v.name, verify=False).name == v.name


def test_a_missing_file_is_detected(reg: Registry):
    v = publish(reg)
    (v.path / "config.yaml").unlink()
    with pytest.raises(RegistryError, match=rf"reward/{v.name}: corrupted version: missing file config.yaml"):
        reg.open("reward")
    info = reg.list_versions("reward")[0]
    assert info.problem == "missing file config.yaml"


def test_a_stray_file_is_detected_but_evals_are_not_stray(reg: Registry):
    v = publish(reg)
    (v.path / "evals" / "whatever.json").write_text("{}")
    reg.verify("reward")
    (v.path / "weights" / "extra.pt").write_bytes(b"pickle!")
    with pytest.raises(RegistryError, match=r"unexpected file weights/extra.pt \(not in the manifest\)"):
        reg.verify("reward")


def test_a_truncated_file_counts_more_problems(reg: Registry):
    v = publish(reg)
    _writable(v.path / "metadata.json").write_text("{")
    (v.path / "lineage.json").unlink()
    with pytest.raises(RegistryError, match=r"missing file lineage.json \(and 1 more problems\)"):
        reg.verify("reward")


def test_an_incomplete_version_fails_to_load(reg: Registry):
    v = publish(reg)
    (v.path / "manifest.json").unlink()
    with pytest.raises(RegistryError, match=rf"reward/{v.name}: incomplete version \(no manifest.json\)"):
        reg.open("reward")
    assert reg.list_versions("reward")[0].problem.startswith("incomplete version")
    _writable(v.path)
    (v.path / "manifest.json").write_text("not json")
    with pytest.raises(RegistryError, match="manifest.json is not valid JSON"):
        reg.open("reward")


def test_a_copied_version_folder_is_refused(reg: Registry):
    v = publish(reg)
    copy = v.path.with_name("v000002-20990101T000000Z")
    shutil.copytree(v.path, copy)
    with pytest.raises(RegistryError, match="manifest says reward/v000001"):
        reg.open("reward", copy.name)
