"""Evaluations: add-only files outside the manifest; identical re-runs are no-ops."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parpo_core.artefacts import Registry, RegistryError
from parpo_core.artefacts.evals import config_hash
from tests.plugins.artefacts import FP, publish

OTHER_FP = "f" * 64
CFG = {"k": 10, "negatives": "all", "split_seed": 0}
RESULT = {"test": {"ndcg@10": 0.3, "recall@10": 0.4}}


def test_eval_file_name_and_content(reg: Registry):
    v = publish(reg)
    p = reg.add_eval("reward", None, OTHER_FP, "temporal", CFG, RESULT)
    h = hashlib.sha256(json.dumps(CFG, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert p == v.path / "evals" / f"{'f' * 16}-temporal-{h[:12]}.json"
    rec = json.loads(p.read_text())
    assert rec["result"] == RESULT and rec["eval_config"] == CFG
    assert rec["data_fingerprint"] == OTHER_FP and rec["version"] == f"reward/{v.name}"
    assert [e["file"] for e in reg.evals("reward")] == [p.name]
    assert reg.open("reward").eval_paths() == [p]


def test_evals_are_add_only_and_idempotent(reg: Registry):
    v = publish(reg)
    manifest_before = (v.path / "manifest.json").read_bytes()
    p = reg.add_eval("reward", v.name, FP, "temporal", CFG, RESULT)
    mtime = p.stat().st_mtime_ns
    # same eval again (config keys in another order): the same file, untouched
    assert reg.add_eval("reward", v.name, FP, "temporal", dict(reversed(CFG.items())), RESULT) == p
    assert p.stat().st_mtime_ns == mtime
    with pytest.raises(RegistryError, match="already holds a different result.*add-only"):
        reg.add_eval("reward", v.name, FP, "temporal", CFG, {"test": {"ndcg@10": 0.31}})
    assert json.loads(p.read_text())["result"] == RESULT
    other = reg.add_eval("reward", v.name, FP, "temporal", CFG | {"k": 20}, RESULT)
    assert other != p
    assert (v.path / "manifest.json").read_bytes() == manifest_before
    reg.verify("reward", v.name)  # evals never make a version look corrupted
    assert sorted(q.name for q in (v.path / "evals").iterdir()) == sorted([p.name, other.name])


def test_eval_names_are_checked(reg: Registry):
    publish(reg)
    with pytest.raises(RegistryError, match="split name 'a/b'"):
        reg.add_eval("reward", None, FP, "a/b", CFG, RESULT)
    with pytest.raises(RegistryError, match="data fingerprint '../x'"):
        reg.add_eval("reward", None, "../x", "temporal", CFG, RESULT)


@given(
    st.dictionaries(st.text(max_size=5), st.integers() | st.floats(allow_nan=False) | st.text(), max_size=6)
)
def test_config_hash_ignores_key_order(cfg):
    assert config_hash(cfg) == config_hash(dict(reversed(list(cfg.items()))))
