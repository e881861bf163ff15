"""``POLICY_BACKENDS``: policy backend name -> its class, as written in a policy version's
``metadata.json`` (``backend``; metadata without it is a ``native`` policy).

Each entry is a loader that imports the class on demand, so listing backends or reading
metadata never imports a model library (``llm`` below imports transformers only when a model
is loaded). A new backend adds one entry like ``_llm``.

Its class implements ``parpo.policy.base.Policy`` plus
``load(directory, reward_model, catalogue)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from parpo_core.names import NameRegistry

DEFAULT_BACKEND = "native"

POLICY_BACKENDS: NameRegistry[Callable[[], type]] = NameRegistry("policy backend")


@POLICY_BACKENDS.register("native")
def _native() -> type:
    from parpo.policy.native import NativePolicy

    return NativePolicy


@POLICY_BACKENDS.register("llm")
def _llm() -> type:
    from parpo.policy.llm.policy import LLMPolicy

    return LLMPolicy


def policy_class(metadata: Mapping[str, Any]) -> type:
    """The class of the backend a policy version's ``metadata`` names (default ``native``)."""
    return POLICY_BACKENDS[metadata.get("backend") or DEFAULT_BACKEND]()
