"""A small registry in tmp_path and a helper that publishes a version without torch.

The registry stores registered kinds only: importing ``parpo`` registers ``reward`` and ``policy``
(in this process and in the processes the atomicity tests spawn, which import this module).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import parpo  # noqa: F401  (registers the reward and policy kinds)
from parpo_core.artefacts import Lineage, Registry, SplitRef, Version

FP = "0123456789abcdef" * 4


def lineage(**kw: Any) -> Lineage:
    base: dict[str, Any] = {
        "data_fingerprint": FP,
        "split": SplitRef(name="temporal", seed=0, positives={"events": ["click", "purchase"]}),
        "seed": 7,
    }
    return Lineage(**(base | kw))


def publish(reg: Registry, kind: str = "reward", tag: str = "x", **kw: Any) -> Version:
    """A version with a config, metadata, a fake weights blob and metrics (no torch needed)."""
    kw.setdefault("lineage", lineage())
    kw.setdefault("config", {"model": "mf", "dim": 8, "tag": tag})
    kw.setdefault("metadata", {"n_users": 3, "n_items": 5})
    kw.setdefault("metrics", {"valid": {"ndcg@10": 0.25}, "test": {"ndcg@10": 0.5, "recall@10": 0.75}})
    kw.setdefault("files", {"weights/blob.bin": tag.encode() * 10})
    return reg.publish(kind, **kw)


@pytest.fixture
def reg(tmp_path: Path) -> Registry:
    return Registry(tmp_path / "REG")
