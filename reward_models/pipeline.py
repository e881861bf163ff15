"""The jobs behind ``parpo reward train`` and ``parpo reward eval``.

``train_and_publish``: load the split, fit (Lightning, one process or DDP),
evaluate on valid/test (+ synthetic extras and MostPop), publish a ``reward``
version: ``weights/model.safetensors`` (the scored vectors and warm flags),
``config.yaml``, ``metadata.json``, ``idmaps/``, ``logs/metrics.csv``,
``metrics.json`` and ``lineage.json``. Nothing here imports Lightning at
module level; ``reward_models.training`` is imported when training starts.

With ``stage1.enabled`` (the ``dice`` preset) the same version also carries stage 1
(``reward_models.profile``): its encoder is fitted before stage 2 (its profiles
shape stage-2 user rows, ``stage1.link``), its maps after it (on the stage-2
vectors); the weights hold both under ``stage1.*``, ``metadata.json`` its spec.
Cold users are scored from their ``cold_profile`` events at publish and in
``evaluate_version`` alike.

``evaluate_version``: recompute the version's split (name, seed, positives
rule) on any dataset, score it through the readout (external ids: users and
items the model never saw are cold), and add ``evals/<fp>-<split>-<hash>.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import torch

from data_pipelines.dataset import Dataset
from data_pipelines.splits import PositivesRule, load_split
from parpo_core.artefacts import Lineage, Registry, SplitRef, Version
from parpo_core.runs import resolve_run_dir
from parpo_core.trackers import log_published
from reward_models.artefact_kind import KIND
from reward_models.config import RewardConfig
from reward_models.data import RewardData
from reward_models.evaluate import Vectors, evaluate
from reward_models.readout import RewardModel, UserProfile
from reward_models.selection import load_uniform_half
from reward_models.warmstart import (
    TrainWindow,
    WarmStart,
    check_extends,
    merge_seen,
    train_profiles,
    warm_start,
    windowed,
)

if TYPE_CHECKING:
    from reward_models.training import FitResult

# metadata.json ``model_version``: 1 (absent) = ids-only DICE trained on positives; 2 = the same
# tables, optionally trained with hybrid features and impressions. The weights' layout is the same.
MODEL_VERSION = 2


@dataclass
class TrainOutcome:
    """Rank 0's result: the published version, its metrics and the training summary."""

    version: Version
    metrics: dict[str, Any]
    training: dict[str, Any]
    run_dir: Path


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


def cold_profiles(frame: pl.DataFrame) -> dict[str, UserProfile]:
    """Readout profiles (items, events, ts) of the users of canonical interaction rows (``cold_profile``)."""
    if frame.height == 0:
        return {}
    f = frame.sort("user_id", "ts", "seq", nulls_last=True).with_columns(
        (pl.col("ts").dt.epoch("us").cast(pl.Float64) / 1e6).alias("__t")
    )
    return {
        u: UserProfile(items=g["item_id"].to_list(), events=g["event"].to_list(), ts=g["__t"].to_list())
        for (u,), g in f.group_by("user_id", maintain_order=True)
    }


def readout_vectors(
    weights: dict[str, torch.Tensor], data: RewardData, meta: dict[str, Any] | None = None
) -> Vectors:
    """The vectors the readout scores ``data``'s users and items with (cold users from their
    ``cold_profile`` through stage 1 when ``meta`` (the version's metadata) has it, else the
    fallbacks), so metrics at publish equal a later ``evaluate_version`` on the same data."""
    model = RewardModel(weights, data.user_ids(), data.item_ids(), meta)
    users = model.user_vectors(data.user_ids(), cold_profiles(data.cold_profile))[0]
    return Vectors(users, model.item_vectors(data.item_ids())[0])


def attach_side_inputs(cfg: RewardConfig, ds: Dataset, data: RewardData) -> None:
    """Load what the config asks for onto ``data``: impression negatives, user and item features."""
    from reward_models.exposure import load_exposure
    from reward_models.features import item_features, user_features

    if cfg.exposure.enabled:
        data.exposure = load_exposure(ds, data, cfg.exposure.valid_share)
    f = cfg.model.features
    data.item_features = item_features(ds, data, f.price_buckets) if f.item else None
    data.user_features = user_features(ds, data) if f.user else None


def side_inputs_meta(data: RewardData) -> dict[str, Any]:
    """What the model was trained with beyond the ids (``metadata.json``)."""
    return {
        "features": {
            side: (x.names if x is not None else [])
            for side, x in (("user", data.user_features), ("item", data.item_features))
        },
        "exposure": data.exposure.summary() if data.exposure is not None else None,
    }


def train_weights(
    cfg: RewardConfig,
    ds: Dataset,
    data: RewardData,
    run: Path,
    *,
    resume: str | Path | None = None,
    warm: WarmStart | None = None,
) -> tuple[FitResult, dict[str, torch.Tensor], dict[str, Any]]:
    """Stage 1's encoder (when enabled), stage 2 (Lightning), stage 1's maps: the fit result, the
    weights to publish (empty on DDP ranks other than 0) and stage 1's metadata (empty when off).
    ``warm``: stage 2 starts from these tables (``reward_models.warmstart``)."""
    from reward_models.training import fit

    s1 = None
    if cfg.stage1.enabled:
        from reward_models.profile.fit import fit_maps, fit_stage1_encoder

        s1, z, enc_losses = fit_stage1_encoder(ds, data, cfg)
    init = (warm.user, warm.item) if warm is not None else None
    result = fit(cfg, data, run, resume=resume, profile=z if s1 is not None else None, init=init)
    if not result.is_global_zero:
        return result, {}, {}
    weights = export_weights(result.tables, data)
    if warm is not None:
        weights = merge_seen(weights, warm)
    if s1 is None:
        return result, weights, {}
    branches = s1.model.branches
    user = torch.cat([result.tables[f"user_{b}"] for b in branches], 1)
    item = torch.cat([result.tables[f"item_{b}"] for b in branches], 1)
    seen = weights["item_seen"].bool()
    map_losses = fit_maps(s1, user, item, seen, cfg.stage1, cfg.runtime.seed)
    meta = s1.model.meta() | {"link": cfg.stage1.link, "losses": enc_losses | map_losses}
    return result, weights | s1.model.tensors(), meta


def metadata(
    cfg: RewardConfig, data: RewardData, training: dict[str, Any], stage1: dict[str, Any] | None = None
) -> dict[str, Any]:
    m = cfg.model
    return ({"stage1": stage1} if stage1 else {}) | {
        "model": "causal_embeddings",
        "model_version": MODEL_VERSION,
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
        **side_inputs_meta(data),
        "readout": "reward_models.readout.RewardModel",
        "preference_reward": "position-discounted mean of per-user interest percentiles (docs/reward-model.md)",
        "training": training,
    }


def load_training_data(cfg: RewardConfig, ds: Dataset, window: TrainWindow | None = None) -> RewardData:
    """The split ``cfg.split`` names (its train part cut to ``window``), with the side inputs the
    model uses (impressions, features)."""
    s = cfg.split
    split = windowed(load_split(ds, s.name, s.seed, s.positives, algorithm=s.algorithm), window)
    data = RewardData.from_split(ds, split, s.positives)
    attach_side_inputs(cfg, ds, data)
    return data


def evaluate_weights(
    cfg: RewardConfig, weights: dict[str, torch.Tensor], data: RewardData, stage1: Any
) -> dict[str, Any]:
    """The full evaluation at publish: ranking metrics, the truth's where known, the uniform half."""
    e = cfg.eval
    return evaluate(
        readout_vectors(weights, data, {"stage1": stage1} if stage1 else None),
        data,
        e.ks,
        batch_users=e.batch_users,
        spearman_items=e.spearman_items,
        seed=e.seed,
        half=load_uniform_half(data),
    )


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
    window: TrainWindow | None = None,
    extra: dict[str, Any] | None = None,
) -> TrainOutcome | None:
    """Train on ``data_dir``'s split, evaluate, publish; None on DDP ranks other than 0.

    ``parent``: a registry version to warm-start from (``reward_models.warmstart``); ``window``:
    the train rows to use (default all); ``extra``: added to the lineage's ``extra``."""
    run = resolve_run_dir(KIND, run_dir)  # the ranks Lightning's DDP launcher starts in fit() read it back
    ds = Dataset(data_dir)
    s = cfg.split
    data = load_training_data(cfg, ds, window)
    warm = None
    if parent is not None:
        base = Registry(registry).open(KIND, parent)
        check_extends(base.path, base.lineage.data_fingerprint, ds)
        branches = ("interest", "conformity") if cfg.model.disentangle else ("interest",)
        warm = warm_start(
            base.path, ds, data, branches, cold_profiles(data.cold_profile) | train_profiles(data)
        )
        extra = (extra or {}) | {"warm_start": warm.counts}
    result, weights, stage1 = train_weights(cfg, ds, data, run, resume=resume, warm=warm)
    if not result.is_global_zero:
        return None
    metrics = evaluate_weights(cfg, weights, data, stage1)
    training = result.summary() | {"preset": label}
    metrics["selection"] = training["selection"]
    metrics["training"] = training
    lineage = Lineage(
        parent=parent,
        data_fingerprint=ds.fingerprint,
        split=SplitRef(name=s.name, seed=s.seed, algorithm=s.algorithm, positives=s.positives),
        seed=cfg.runtime.seed,
        extra={"source": ds.source, "backbone": cfg.model.backbone, "disentangle": cfg.model.disentangle}
        | ({"window": window.label()} if window is not None else {})
        | (extra or {}),
    )
    version = Registry(registry).publish(
        KIND,
        lineage=lineage,
        weights=weights,
        config=cfg,
        metadata=metadata(cfg, data, training, stage1),
        metrics=metrics,
        idmaps=_idmap_paths(ds),
        logs=result.logs,
    )
    log_published(result.trackers, version.path, version.label)
    return TrainOutcome(version, metrics, training, run)


def evaluate_version(
    registry: str | Path,
    data_dir: str | Path,
    version: str | None = None,
    *,
    split: str | None = None,
    ks: list[int] | None = None,
) -> tuple[Path, dict[str, Any]]:
    """Evaluate a published version on ``data_dir`` (its own split recomputed there); add the eval file.

    The split is cut with the version's own split algorithm: versions published before
    it was recorded are evaluated on the algorithm-1 (row) split they were trained on."""
    reg = Registry(registry)
    v = reg.open(KIND, version)
    lin = v.lineage
    rule = PositivesRule.model_validate(lin.split.positives) if lin.split.positives else PositivesRule()
    name = split or lin.split.name
    ds = Dataset(data_dir)
    data = RewardData.load(ds, name, lin.split.seed, rule, lin.split.algorithm)
    model = RewardModel.load(v.path, verify=False)  # just verified by open()
    uv, _ = model.user_vectors(data.user_ids(), cold_profiles(data.cold_profile))
    iv, _ = model.item_vectors(data.item_ids())
    cfg_eval = (v.config or {}).get("eval", {})
    ks = ks or cfg_eval.get("ks") or [10, 20, 50]
    n, seed = cfg_eval.get("spearman_items", 200), cfg_eval.get("seed", 0)
    result = evaluate(Vectors(uv, iv), data, ks, spearman_items=n, seed=seed, half=load_uniform_half(data))
    result |= {
        "split": name,
        "split_seed": lin.split.seed,
        "split_algorithm": lin.split.algorithm,
        "data_fingerprint": ds.fingerprint,
        "cold_users": int((~np.isin(data.users["id"].to_numpy(), list(model.user_index))).sum()),
    }
    config = {
        "ks": list(ks),
        "spearman_items": n,
        "seed": seed,
        "split_seed": lin.split.seed,
        "split_algorithm": lin.split.algorithm,
        "positives": rule.canonical(),
    }
    path = reg.add_eval(KIND, v.name, ds.fingerprint, name, config, result)
    return path, result
