"""Policies: the ``Policy`` interface (``base``), the native transformer backend (``native``) and
the LLM backend (``llm``: a Hugging Face causal LM writing JSON tool calls; docs/llm.md).
"""

from parpo.policy.base import ActOutput, Policy
from parpo.policy.config import NativePolicyConfig

__all__ = ["ActOutput", "NativePolicyConfig", "Policy"]
