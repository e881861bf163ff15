"""The jobs behind ``parpo reward train`` and ``parpo reward eval``.

``train_and_publish``: load the split, fit (Lightning, one process or DDP),
evaluate on valid/test (+ synthetic extras and MostPop), publish a ``reward``
version: ``weights/model.safetensors`` (the scored vectors and warm flags),
``config.yaml``, ``metadata.json``, ``idmaps/``, ``logs/metrics.csv``,
``metrics.json`` and ``lineage.json``. Nothing here imports Lightning at
module level; ``reward_models.training`` is imported when training starts.

``evaluate_version``: recompute the version's split (name, seed, positives
rule) on any dataset, score it through the readout (external ids: users and
items the model never saw are cold), and add ``evals/<fp>-<split>-<hash>.json``.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from data_pipelines.dataset import Dataset
from data_pipelines.splits import PositivesRule
from reward_models.config import RewardConfig
from reward_models.data import RewardData
from reward_models.evaluate import Vectors, evaluate
from reward_models.registry import Lineage, Registry, SplitRef, Version

KIND = "reward"
RUN_DIR_ENV = "PARPO_REWARD_RUN_DIR"  # shared with the ranks Lightning's DDP launcher starts


@dataclass
class TrainOutcome:
    """Rank 0's result: the published version, its metrics and the training summary."""

    version: Version
    metrics: dict[str, Any]
    training: dict[str, Any]
    run_dir: Path


def default_run_dir() -> Path:
    return Path("runs") / f"reward-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def eval_config(cfg: RewardConfig) -> dict[str, Any]:
    e = cfg.eval
    return {"ks": list(e.ks), "spearman_items": e.spearman_items, "seed": e.seed, "score": "click"}


def export_weights(tables: dict[str, torch.Tensor], data: RewardData) -> dict[str, torch.Tensor]:
    """Scored vectors + warm flags + train popularity: everything the readout needs."""
    return dict(tables) | {
        "user_seen": torch.from_numpy(data.seen_users().astype(np.uint8)),
        "item_seen": torch.from_numpy(data.seen_items().astype(np.uint8)),
        "item_popularity": torch.from_numpy(data.popularity.astype(np.float32)),
    }


def readout_vectors(weights: dict[str, torch.Tensor], data: RewardData) -> Vectors:
    """The vectors the readout scores ``data``'s users and items with (cold rows: mean warm vectors),
    so metrics at publish equal a later ``evaluate_version`` on the same data."""
    from reward_models.readout import RewardModel

    model = RewardModel(weights, data.user_ids(), data.item_ids())
    return Vectors(model.user_vectors(data.user_ids())[0], model.item_vectors(data.item_ids())[0])


def metadata(cfg: RewardConfig, data: RewardData, training: dict[str, Any]) -> dict[str, Any]:
    m = cfg.model
    return {
        "model": "causal_embeddings",
        "stage": 2,
        "backbone": m.backbone,
        "dim": m.dim,
        "n_layers": m.n_layers if m.backbone == "lightgcn" else 0,
        "disentangled": m.disentangle,
        "branches": ["interest", "conformity"] if m.disentangle else ["interest"],
        "n_users": data.n_users,
        "n_items": data.n_items,
        "warm_users": int(data.seen_users().sum()),
        "warm_items": int(data.seen_items().sum()),
        "n_train_pairs": data.n_train,
        "readout": "reward_models.readout.RewardModel",
        "preference_reward": "position-discounted mean of per-user interest percentiles (docs/reward-model.md)",
        "training": training,
    }


def _idmap_paths(ds: Dataset) -> dict[str, Path]:
    tables = ds.manifest.get("tables", {})
    return {k: ds.root / tables[f"idmaps/{k}"]["path"] for k in ("users", "items")}


def train_and_publish(
    cfg: RewardConfig,
    data_dir: str | Path,
    registry: str | Path,
    run_dir: str | Path | None = None,
    *,
    resume: str | Path | None = None,
    parent: str | None = None,
    label: str | None = None,
) -> TrainOutcome | None:
    """Train on ``data_dir``'s split, evaluate, publish; None on DDP ranks other than 0."""
    from reward_models.training import fit

    if (
        run_dir is None and os.environ.get("LOCAL_RANK", "0") != "0"
    ):  # a rank Lightning's DDP launcher started
        run_dir = os.environ.get(RUN_DIR_ENV)
    run = Path(run_dir or default_run_dir())
    os.environ[RUN_DIR_ENV] = str(run.resolve())  # inherited by the ranks the launcher starts in fit()
    ds = Dataset(data_dir)
    s = cfg.split
    data = RewardData.load(ds, s.name, s.seed, s.positives)
    result = fit(cfg, data, run, resume=resume)
    if not result.is_global_zero:
        return None
    e = cfg.eval
    weights = export_weights(result.tables, data)
    metrics = evaluate(
        readout_vectors(weights, data),
        data,
        e.ks,
        batch_users=e.batch_users,
        spearman_items=e.spearman_items,
        seed=e.seed,
    )
    training = result.summary() | {"preset": label}
    metrics["training"] = training
    lineage = Lineage(
        parent=parent,
        data_fingerprint=ds.fingerprint,
        split=SplitRef(name=s.name, seed=s.seed, positives=s.positives),
        seed=cfg.runtime.seed,
        extra={"source": ds.source, "backbone": cfg.model.backbone, "disentangle": cfg.model.disentangle},
    )
    version = Registry(registry).publish(
        KIND,
        lineage=lineage,
        weights=weights,
        config=cfg,
        metadata=metadata(cfg, data, training),
        metrics=metrics,
        idmaps=_idmap_paths(ds),
        logs=result.logs,
    )
    return TrainOutcome(version, metrics, training, run)


def evaluate_version(
    registry: str | Path,
    data_dir: str | Path,
    version: str | None = None,
    *,
    split: str | None = None,
    ks: list[int] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Evaluate a published version on ``data_dir`` (its own split recomputed there); add the eval file."""
    from reward_models.readout import RewardModel

    reg = Registry(registry)
    v = reg.open(KIND, version)
    lin = v.lineage
    rule = PositivesRule.model_validate(lin.split.positives) if lin.split.positives else PositivesRule()
    name = split or lin.split.name
    ds = Dataset(data_dir)
    data = RewardData.load(ds, name, lin.split.seed, rule)
    model = RewardModel.load(v.path, verify=False)  # just verified by open()
    uv, _ = model.user_vectors(data.user_ids())
    iv, _ = model.item_vectors(data.item_ids())
    cfg_eval = (v.config or {}).get("eval", {})
    ks = ks or cfg_eval.get("ks") or [10, 20, 50]
    n, seed = cfg_eval.get("spearman_items", 200), cfg_eval.get("seed", 0)
    result = evaluate(Vectors(uv, iv), data, ks, spearman_items=n, seed=seed)
    result |= {
        "split": name,
        "split_seed": lin.split.seed,
        "data_fingerprint": ds.fingerprint,
        "cold_users": int((~np.isin(data.users["id"].to_numpy(), list(model.user_index))).sum()),
    }
    config = {
        "ks": list(ks),
        "spearman_items": n,
        "seed": seed,
        "split_seed": lin.split.seed,
        "positives": rule.canonical(),
    }
    path = reg.add_eval(KIND, v.name, ds.fingerprint, name, config, result)
    return path, result
