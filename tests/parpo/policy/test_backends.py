"""Policy versions name their backend in metadata; the bundle looks the class up."""

from __future__ import annotations

import pytest

from parpo.policy.backends import POLICY_BACKENDS, policy_class
from parpo.policy.native import NativePolicy
from parpo_core.errors import UserError


def test_metadata_names_the_backend_and_no_backend_means_native() -> None:
    assert policy_class({"backend": "native"}) is NativePolicy
    assert policy_class({}) is NativePolicy  # versions written before backends were recorded
    assert NativePolicy.kind == "native" and "native" in POLICY_BACKENDS


def test_an_unknown_backend_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(UserError, match="unknown policy backend 'gpt'; known: llm, native"):
        policy_class({"backend": "gpt"})


def test_the_llm_backend_is_registered_and_its_configs_import_no_model_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, parpo.policy.backends, parpo.policy.llm, parpo.cli.policy; "
        "print('llm' in parpo.policy.backends.POLICY_BACKENDS, "
        "[m for m in ('transformers', 'peft', 'vllm') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "[]"]
