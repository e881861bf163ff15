"""Policies: the ``Policy`` interface (``base``) and the native transformer backend (``native``).

An LLM backend (HF transformers / vLLM rollouts) implements the same interface later.
"""

from parpo.policy.base import ActOutput, Policy
from parpo.policy.config import NativePolicyConfig

__all__ = ["ActOutput", "NativePolicyConfig", "Policy"]
