"""Weights: safetensors round trips are bit-exact; no pickle anywhere."""

from __future__ import annotations

import json
import pickle
import struct

import pytest
import torch

from parpo_core.artefacts import Registry, RegistryError
from parpo_core.artefacts.weights import load_weights, save_weights, weights_metadata
from tests.plugins.artefacts import lineage


def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, generator=g)
    return {
        "f32": torch.randn(4, 3, generator=g),
        "bf16": torch.randn(7, generator=g).to(torch.bfloat16),
        "i64": torch.tensor([0, -1, 2**62, -(2**63)], dtype=torch.int64),
        "f16": torch.randn(2, 2, generator=g).half(),
        "mask": torch.tensor([True, False, True]),
        "transposed": base.t(),  # not contiguous
        "tied": base,  # shares storage with "transposed"
        "empty": torch.zeros(0, 3),
    }


def _forbid_pickle(monkeypatch):
    def nope(*a, **k):
        raise AssertionError("pickle/torch.load used")

    for mod, name in ((pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load")):
        monkeypatch.setattr(mod, name, nope)


def test_round_trip_is_bit_exact(tmp_path, monkeypatch):
    _forbid_pickle(monkeypatch)
    src = _tensors()
    p = save_weights(src, tmp_path / "w.safetensors", metadata={"format": "pt", "dim": 5})
    back = load_weights(p)
    assert set(back) == set(src)
    for k, t in src.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape
        assert torch.equal(back[k].view(torch.uint8), t.contiguous().view(torch.uint8)), k
    assert weights_metadata(p) == {"format": "pt", "dim": "5"}
    # The file is the safetensors layout: u64 header length, JSON header, raw bytes.
    raw = p.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    assert header["bf16"]["dtype"] == "BF16" and header["i64"]["dtype"] == "I64"
    assert not list(tmp_path.glob(".*.tmp"))


def test_published_weights_load_through_the_version(tmp_path, monkeypatch):
    reg = Registry(tmp_path / "REG")
    src = _tensors()
    with reg.stage("reward") as st:
        st.write_weights(src)
        st.write_weights({"u": torch.ones(2)}, name="profile_encoder")
        st.lineage = lineage()
        v = st.publish()
    _forbid_pickle(monkeypatch)
    opened = reg.open("reward")
    assert opened.files("weights/") == ["weights/model.safetensors", "weights/profile_encoder.safetensors"]
    back = opened.load_weights()
    assert all(
        torch.equal(back[k].view(torch.uint8), t.contiguous().view(torch.uint8)) for k, t in src.items()
    )
    assert torch.equal(opened.load_weights("profile_encoder")["u"], torch.ones(2))
    with pytest.raises(RegistryError, match=f"reward/{v.name}: no file 'weights/nope.safetensors'"):
        opened.load_weights("nope")


def test_bad_weights_files_are_one_line_errors(tmp_path):
    with pytest.raises(RegistryError, match="no such weights file"):
        load_weights(tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(RegistryError, match="not a readable safetensors file"):
        load_weights(bad)
    with pytest.raises(TypeError, match="not a torch.Tensor"):
        save_weights({"a": [1, 2]}, tmp_path / "x.safetensors")
