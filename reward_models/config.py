"""The ``reward`` config group (``configs/reward/*.yaml``): stage-2 reward model training.

Presets: ``dice`` (interest/conformity causal embeddings, DICE, WWW 2021), ``mf``
(plain MF-BPR, the baseline), ``lightgcn`` (DICE on a LightGCN backbone). Every key
is validated here; ``parpo reward train --config dice model.dim=32`` overrides one.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from data_pipelines.splits.rule import PositivesRule
from parpo_core.config import RuntimeConfig, StrictModel


class RewardSplitConfig(StrictModel):
    """Which split the model is trained, selected and tested on (lineage records all three)."""

    name: str = Field("intervened", description="temporal, intervened, cold_users, cold_items or native")
    seed: int = Field(0, description="split realisation")
    algorithm: Literal[1, 2] = Field(
        2, description="1: positive rows; 2: (user, item) pairs with all their rows (docs/splits.md)"
    )
    positives: PositivesRule = PositivesRule()


class LossWeights(StrictModel):
    """Initial weights of the cause-specific terms (the curriculum decays ``int`` and ``con``)."""

    int: float = Field(0.1, ge=0, description="interest BPR (triples whose negative is more popular)")
    con: float = Field(0.1, ge=0, description="conformity BPR (direction of the popularity comparison)")
    disc: float = Field(0.01, ge=0, description="discrepancy between interest and conformity embeddings")


class FeatureConfig(StrictModel):
    """Hybrid embeddings: a user's (item's) vector on each branch is its id row plus the sum of
    its features' rows (``reward_models.features``), so sparse and cold rows share strength.
    Off (the default): ids only, today's model."""

    item: bool = Field(False, description="item category, attributes and price bucket")
    user: bool = Field(False, description="the users table's features (categorical and numeric)")
    price_buckets: int = Field(8, ge=1, description="quantile buckets of the item price")


class ModelConfig(StrictModel):
    backbone: Literal["mf", "lightgcn"] = Field(
        "mf", description="mf: embedding tables; lightgcn: graph propagation over the train interactions"
    )
    dim: int = Field(64, ge=1, description="embedding size of each branch (interest, conformity)")
    n_layers: int = Field(2, ge=0, description="LightGCN propagation layers (ignored by mf)")
    disentangle: bool = Field(True, description="False: one embedding per user/item, plain BPR (MF-BPR)")
    discrepancy: Literal["dcor", "l2", "orthogonal", "none"] = Field(
        "dcor",
        description="dcor | l2 | orthogonal | none: the term that pushes interest and conformity apart",
    )
    dcor_sample: int = Field(256, ge=2, description="users and items subsampled per batch for dCor")
    init_std: float = Field(0.05, gt=0, description="normal init of the embedding tables")
    weights: LossWeights = LossWeights()
    reweight: float = Field(
        0.0, ge=0, description="popularity re-weighting exponent (interest: rare positives up; 0 = off)"
    )
    features: FeatureConfig = FeatureConfig()
    conformity: Literal["embedding", "popularity", "scalar"] = Field(
        "embedding",
        description="item side of the conformity branch: embedding = a free row per item (DICE); "
        "popularity = the row of the item's train-popularity bucket, so the branch explains popularity only; "
        "scalar = the bucket's fixed level: conformity(u, i) = c_u * level(i), a coefficient per user",
    )
    popularity_buckets: int = Field(
        16, ge=2, description="conformity: popularity buckets floor(log2(1 + distinct train users)), capped"
    )

    @model_validator(mode="after")
    def _scalar_on_mf(self) -> ModelConfig:
        # LightGCN mixes user conformity rows into the items': the score is no longer c_u * level(i)
        if self.conformity == "scalar" and self.backbone != "mf":
            raise ValueError(
                "model.conformity scalar needs model.backbone mf (lightgcn propagates the levels)"
            )
        return self


class ExposureConfig(StrictModel):
    """Exposure-aware training (``reward_models.exposure``): impressions (shown, never a positive of
    the pair) are negatives next to the sampled ones. Off, or a dataset without impressions:
    today's training."""

    enabled: bool = Field(False, description="use the dataset's impressions as negatives")
    weight: float = Field(1.0, gt=0, description="weight of an impression triple (a sampled triple: 1)")
    interest: Literal["popularity", "exposed"] = Field(
        "popularity",
        description="cause terms of impression triples: DICE's popularity rule, or exposed = "
        "interest always, conformity never (equal exposure)",
    )
    valid_share: float = Field(
        0.1, ge=0, lt=1, description="share of impression pairs held out (hash) for the valid log-loss"
    )
    pointwise: float = Field(
        0.0,
        ge=0,
        description="weight of the pointwise exposure log-loss: train positives clicked (1), "
        "impressions passed over (0), on the click score plus a learned bias; 0: off",
    )


class SamplerConfig(StrictModel):
    """Popularity-aware negative sampling with a margin (``reward_models.sampler``) and its curriculum."""

    margin: float = Field(40.0, ge=0, description="absolute margin on train counts")
    margin_decay: float = Field(0.9, gt=0, le=1, description="margin *= margin_decay after every epoch")
    loss_decay: float = Field(0.9, gt=0, le=1, description="int and con weights *= loss_decay every epoch")
    p_more: float = Field(0.5, ge=0, le=1, description="probability of a more popular negative")
    click_correction: bool = Field(
        True,
        description="importance-weight the click BPR back to uniform negatives (interest/conformity unweighted)",
    )


def _int_or_auto(v: object, least: int, kind: str) -> object:
    # one message for both forms (a union would report each member's error)
    if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= least):
        return v
    raise ValueError(f"must be {kind} integer or auto, not {v!r}")


class TrainConfig(StrictModel):
    epochs: int = Field(300, ge=1, description="maximum epochs (early stopping may end sooner)")
    batch_size: int | Literal["auto"] = Field(
        8192,
        description="global batch of sampled triples (split over ranks; impression triples ride along); "
        "auto = the power of two nearest an eighth of the train positives, within [1024, 8192]",
    )
    optimizer: Literal["adam", "lazy_adam"] = Field(
        "adam",
        description="adam = every row moves at every step (its momentum); lazy_adam = the id tables' rows "
        "move only at the steps that read them, so a step costs the batch, not the catalogue (mf backbone; "
        "LightGCN reads every row: adam)",
    )
    lr: float = Field(0.01, gt=0, description="Adam learning rate")
    weight_decay: float = Field(0.0, ge=0, description="Adam L2 on the parameters")
    reg: float = Field(0.0, ge=0, description="L2 on the batch's embedding rows (per triple)")
    patience: int = Field(
        10, ge=1, description="evaluations without a better selection target (train.select) before stopping"
    )
    early_stopping: bool = Field(
        True, description="stop after `patience` evaluations without a better selection target"
    )
    restore_best: bool = Field(True, description="publish the weights of the best valid epoch")
    eval_every: int = Field(1, ge=1, description="epochs between valid evaluations")
    eval_every_steps: int | Literal["auto"] = Field(
        0,
        description="optimiser steps between valid evaluations (0: every eval_every epochs); auto = every "
        "10 steps, or an eighth of an epoch when that is longer",
    )
    select: Literal["auto", "uniform", "ndcg"] = Field(
        "ndcg",
        description="selection target: auto = held-out impression log-loss, else the uniform half, else "
        "valid NDCG@10; uniform = the uniform half first, then the auto order",
    )
    max_steps: int = Field(-1, ge=-1, description="stop after this many optimiser steps (-1: no limit)")
    progress_bar: bool = Field(True, description="show a progress bar (off in tests and logs)")
    checkpoint: bool = Field(True, description="write last.ckpt (exact resume) every evaluation")
    checkpoint_every_n_steps: int = Field(0, ge=0, description="also step-<N>.ckpt every N steps (0: off)")

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch(cls, v: object) -> object:
        return _int_or_auto(v, 1, "a positive")

    @field_validator("eval_every_steps", mode="before")
    @classmethod
    def _eval_steps(cls, v: object) -> object:
        return _int_or_auto(v, 0, "a non-negative")

    def batch_for(self, n_positives: int) -> int:
        """The global batch for a train split of ``n_positives``: the set integer, or for ``auto``
        the power of two nearest ``n_positives / 8`` (in log scale) within [1024, 8192]. At least
        about eight steps per epoch: a small split overfits within a few epochs and selection
        needs steps to choose from (the synthetic default, 7k positives, peaks near step 20 at
        1024); a large one spends less on each step's fixed cost (the discrepancy, the optimiser)
        with 8192 (benchmarks/README.md, "Batch size that follows the data")."""
        if self.batch_size != "auto":
            return self.batch_size
        return int(2 ** min(13, max(10, round(math.log2(max(n_positives, 1) / 8)))))

    def eval_steps_for(self, n_positives: int) -> int:
        """Optimiser steps between evaluations for a train split of ``n_positives`` (0: every
        ``eval_every`` epochs): the set integer, or for ``auto`` 10, or an eighth of an epoch when
        that is longer. Each evaluation ranks every item for a fixed user sample, so its cost grows
        with the catalogue; at most about eight per epoch bounds them by epochs, not steps (a
        fixed 10 meant about 150 rankings of 160k items at 5M positives; auto: 15, about 4 min:
        benchmarks/README.md, "Reward model at 5M positives"), while every split below ~650k
        positives (the synthetic default, ML-100K, the real catalogues) still evaluates every 10 steps."""
        if self.eval_every_steps != "auto":
            return self.eval_every_steps
        return max(10, math.ceil(math.ceil(n_positives / self.batch_for(n_positives)) / 8))


class EvalConfig(StrictModel):
    ks: list[int] = Field([10, 20, 50], min_length=1, description="cut-offs of the ranking metrics")
    batch_users: int = Field(1024, ge=1, description="users scored per batch in full-sort evaluation")
    spearman_items: int = Field(200, ge=2, description="random items per user for the synthetic Spearman")
    seed: int = Field(0, description="seed of the synthetic Spearman item draw")
    valid_users: int = Field(
        0,
        ge=0,
        description="fixed sample of users evaluated during training: of the valid users, and of the "
        "uniform half's selection users (0: all of them)",
    )

    @model_validator(mode="after")
    def _k10(self) -> EvalConfig:
        if 10 not in self.ks:
            raise ValueError("eval.ks must contain 10 (model selection uses valid NDCG@10)")
        if min(self.ks) < 1:
            raise ValueError("eval.ks must be positive")
        return self


class Stage1Config(StrictModel):
    """Stage 1 (``reward_models.profile``): multi-view profile encoder, profile -> user and
    attributes -> item maps for cold users and items, and its link to stage 2."""

    enabled: bool = Field(False, description="train stage 1 too (on in the dice preset)")
    dim: int = Field(32, ge=1, description="profile embedding size")
    hidden: int = Field(64, ge=1, description="hidden width of the per-view MLPs and decoders")
    map_hidden: int = Field(128, ge=1, description="hidden width of the user and item maps")
    user_features: bool = Field(True, description="use the users table's explicit features (a view)")
    epochs: int = Field(30, ge=1, description="encoder epochs (reconstruction + InfoNCE)")
    map_epochs: int = Field(60, ge=1, description="epochs of each map")
    batch_size: int = Field(256, ge=2, description="profile encoder batch size")
    max_steps: int = Field(
        0,
        ge=0,
        description="at most this many optimiser steps for the encoder and for each map, whatever "
        "the epochs (0: no cap): the cost stops growing with users x epochs",
    )
    lr: float = Field(0.003, gt=0, description="AdamW learning rate of the profile encoder and maps")
    weight_decay: float = Field(1e-5, ge=0, description="AdamW weight decay of the profile encoder")
    temperature: float = Field(0.2, gt=0, description="InfoNCE temperature")
    view_dropout: float = Field(0.3, ge=0, lt=1, description="probability of dropping each view")
    nce_weight: float = Field(1.0, ge=0, description="weight of the InfoNCE term next to reconstruction")
    link: Literal["init", "regularize", "none"] = Field(
        "init", description="how profiles shape stage-2 user embeddings"
    )
    link_weight: float = Field(0.1, ge=0, description="weight of the regularize link's L2 term")


class RewardConfig(StrictModel):
    runtime: RuntimeConfig = RuntimeConfig()
    split: RewardSplitConfig = RewardSplitConfig()
    model: ModelConfig = ModelConfig()
    sampler: SamplerConfig = SamplerConfig()
    exposure: ExposureConfig = ExposureConfig()
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    stage1: Stage1Config = Stage1Config()
