"""The policy side of a retrain: a native policy grown to a new catalogue and reward version,
its anchors carried over, and the paired comparison the gate reads (docs/retraining.md).

Growing (``grow``): every weight of the base policy is copied; the policy's own item embeddings
are copied by item id, and an item new to the base gets ``x_i W`` where ``x_i`` are its
catalogue features (category one-hot, attribute multi-hot, popularity, recency, price, has
price) and ``W`` the ridge regression of the base's embeddings on the base items' features:

    W = (X_old^T X_old + lambda I)^-1 X_old^T E_old          lambda = RIDGE

The user input reads the new reward version's user vectors (same width as the base's: the
reward config is kept). Anchors (per-user EMA of the preference reward, by the reward model's
user index, which only grows) are carried over by ``ANCHOR_MODES``:

    carry  as they were
    decay  (default) each returning user's update count is capped at 1, so the first update
           under the new reward moves its anchor halfway (warm-up rate 1 / (c + 1)), then at the
           EMA rate: re-based to the new reward's scale within a few updates
    reset  dropped: every user starts fresh

The skill graph memory (``parpo.memory``), when the base policy has one, is carried as it is: the
grown policy retrieves from the base's graph, and the warm-started run loads the base's saved
memory on the new reward version's user map (returning users keep their index, new ones are
appended) and keeps writing to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from parpo.env.catalogue import Catalogue
from parpo_core.errors import UserError

RIDGE = 1.0
AnchorMode = Literal["carry", "decay", "reset"]
ANCHOR_MODES: tuple[str, ...] = ("carry", "decay", "reset")


def item_design(cat: Catalogue) -> np.ndarray:
    """[n_items, F] catalogue features of every item (the regression's inputs)."""
    n = len(cat)
    onehot = np.zeros((n, len(cat.categories)), dtype=np.float64)
    has = cat.cat >= 0
    onehot[np.flatnonzero(has), cat.cat[has]] = 1.0
    attrs = np.zeros((n, len(cat.attributes)), dtype=np.float64)
    attrs[cat.attr_rows, cat.attr_codes] = 1.0
    static = cat.features(np.arange(n), cat.request_view(None, _no_constraints()))[:, :4]
    return np.concatenate([onehot, attrs, static.astype(np.float64), np.ones((n, 1))], 1)


def _no_constraints() -> Any:
    from parpo.env.schema import Constraints

    return Constraints()


def item_rows(old: Catalogue, new: Catalogue, emb: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Embeddings [len(new), d] for ``new``'s items from the base's ``emb`` [len(old), d]: copied by
    id, the others from their features (module docstring); and how many were predicted."""
    rows = new.rows(old.item_ids)
    if (rows < 0).any():
        gone = old.item_ids[int(np.flatnonzero(rows < 0)[0])]
        raise UserError(f"item {gone!r} of the base policy's catalogue is not in the new dataset's")
    x = item_design(new)
    xo, e = x[rows], emb.double().numpy()
    w = np.linalg.solve(xo.T @ xo + RIDGE * np.eye(x.shape[1]), xo.T @ e)
    out = torch.from_numpy(x @ w).to(emb.dtype)
    out[torch.from_numpy(rows)] = emb
    return out, len(new) - len(old)


def grow(bundle: Any, reward_model: Any, catalogue: Catalogue) -> tuple[Any, int]:
    """The base policy of ``bundle`` (``PolicyBundle``) acting on ``catalogue`` with user vectors of
    ``reward_model``; and the number of item embeddings predicted from features."""
    from parpo.policy.native import NativePolicy

    base = bundle.policy
    if not isinstance(base, NativePolicy):
        raise UserError(f"{bundle.version.label}: only native policies can be warm-started ({base.kind})")
    policy = NativePolicy.create(base.net.cfg, reward_model, catalogue, base.search_k)
    state, want, predicted = base.net.state_dict(), policy.net.state_dict(), 0
    out = {}
    for k, v in want.items():
        b = state.get(k)
        if k == "item.weight" and b is not None:
            out[k], predicted = item_rows(bundle.catalogue, catalogue, b)
        elif b is not None and b.shape == v.shape:
            out[k] = b.clone()
        else:
            have = tuple(b.shape) if b is not None else "none"
            raise UserError(
                f"{bundle.version.label}: weight {k} is {have} in the base policy and {tuple(v.shape)} "
                "for the new reward version; retrain the reward model with the base's model settings"
            )
    policy.net.load_state_dict(out)
    if base.featurizer.memory is not None:  # the same skills, read on the grown user map
        from parpo.memory.policy_memory import PolicyMemory

        policy.featurizer.memory = PolicyMemory(base.featurizer.memory.graph, reward_model.user_index)
    return policy, predicted


def carried_anchors(bundle: Any, mode: str) -> dict[str, Any] | None:
    """The base policy's anchors as an ``AnchorStore.state_dict`` under ``mode`` (None: reset)."""
    from parpo.algorithms.anchor_io import load_anchors
    from parpo.policy.bundle import ANCHORS

    if mode == "reset" or not bundle.version.has(ANCHORS):
        return None
    state = load_anchors(bundle.version.file(ANCHORS)).state_dict()
    if mode == "decay":
        state["count"] = state["count"].clamp(max=1)
    return state


def carried_memory(bundle: Any) -> Path | None:
    """The base policy's skill memory folder (``parpo.memory.store``), None when it has none: the
    warm-started run loads it on the new reward version's user map, which extends the base's."""
    from parpo.memory.policy_memory import MEMORY
    from parpo.policy.bundle import POLICY_DIR

    folder = bundle.version.path / POLICY_DIR / MEMORY
    return folder if folder.is_dir() else None


def per_task(env: Any, policy: Any, tasks: dict[str, list], seed: int) -> Any:
    """Greedy episodes of ``policy`` on each part's tasks: rows with ``part``, ``task_id`` and the
    metrics of ``parpo.env.evaluate.METRICS``."""
    import polars as pl

    from parpo.env.evaluate import run_episodes
    from parpo.policy.agent import PolicyAgent

    frames = [
        run_episodes(env, PolicyAgent(policy, greedy=True, seed=seed), t).with_columns(part=pl.lit(part))
        for part, t in tasks.items()
        if t
    ]
    return pl.concat(frames, how="diagonal") if frames else pl.DataFrame()
