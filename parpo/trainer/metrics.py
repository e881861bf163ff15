"""What one update logs about its rollouts: per reward component, and the reported metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from parpo.algorithms import AnchorStore

#: Reported, never trained on (the environment's ``info``).
REPORTED: tuple[str, ...] = ("hit@10", "ndcg@10", "task_quality", "true_preference")


def reward_metrics(rewards: dict[str, Tensor]) -> dict[str, float]:
    """``reward/<component>/{mean,std,min,max}`` over the episodes of one update."""
    out = {}
    for k, v in rewards.items():
        v = v.double()
        out[f"reward/{k}/mean"] = float(v.mean())
        out[f"reward/{k}/std"] = float(v.std(unbiased=False))
        out[f"reward/{k}/min"] = float(v.min())
        out[f"reward/{k}/max"] = float(v.max())
    return out


def rollout_report(infos: Sequence[dict[str, Any]]) -> dict[str, float]:
    """``report/<metric>`` means over the episodes, ``report/steps`` and ``report/truncated``."""
    out = {}
    for m in REPORTED:
        vals = [i[m] for i in infos if m in i]
        if vals:
            out[f"report/{m}"] = float(np.mean(vals))
    out["report/steps"] = float(np.mean([i.get("steps", 0) for i in infos]))
    out["report/no_slate"] = float(np.mean([not i.get("slate") for i in infos]))
    return out


def anchor_divergence(fabric: Any, anchors: AnchorStore) -> float:
    """Largest difference between ranks of a digest of the anchors (0 when they agree, as they must)."""
    snap = anchors.snapshot()
    digest = torch.tensor(
        [float(snap.mean.sum()), float(snap.var.sum()), float(snap.count.sum()), float(len(snap))],
        dtype=torch.float64,
        device=fabric.device,
    )
    every = fabric.all_gather(digest)
    return float((every - every[0]).abs().max())


def anchor_distribution(anchors: AnchorStore) -> dict[str, float]:
    snap = anchors.snapshot()
    seen = snap.count > 0
    if not bool(seen.any()):
        return {}
    mean, std = snap.mean[seen], snap.var[seen].clamp(min=0).sqrt()
    return {
        "anchors/mean_mu": float(mean.mean()),
        "anchors/std_mu": float(mean.std(unbiased=False)),
        "anchors/mean_sigma": float(std.mean()),
    }
