"""Light pydantic configs for the algorithms. Validated once, at the edge; the math trusts them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from parpo_core.config import StrictModel


class AdvantageConfig(StrictModel):
    """Which estimator and its constants (``ADVANTAGES[cfg.estimator]``).

    ``weights`` maps reward component names (``task/<name>``, ``preference``) to their weight in
    the sum; empty means weight 1 for every component. ``whiten=None`` means the estimator's own
    default (on for ``gdpo``, off for the others, including ``parpo``).
    """

    estimator: str = "parpo"
    weights: dict[str, float] = Field(default_factory=dict)
    eps: float = Field(1e-6, ge=0.0, description="added to every std / scale in a denominator")
    sample_std: bool = Field(False, description="False: population std (divide by n); True: n - 1")
    whiten: bool | None = None
    # PARPO preference anchor (see parpo/algorithms/advantages.py::parpo)
    gamma: float = Field(1.0, ge=0.0, description="baseline floor = mu_u - gamma * sigma_u")
    kappa: float = Field(0.1, ge=0.0, description="scale floor = kappa * (|mu_u| + sigma_u)")
    n_min: int = Field(3, ge=1, description="anchor updates a user needs before the anchor is used")
    anchor_alpha: float = Field(0.1, gt=0.0, le=1.0, description="EMA rate of the anchor store")
    preference_key: str = "preference"
    task_prefix: str = "task/"


class LossConfig(StrictModel):
    """Policy loss (``LOSSES[cfg.name]``), its clipping, TIS, KL and aggregation."""

    name: str = "ppo"
    clip_eps_low: float = Field(0.2, ge=0.0, lt=1.0, description="ratio lower bound 1 - eps_low")
    clip_eps_high: float = Field(0.2, ge=0.0, description="ratio upper bound 1 + eps_high (DAPO: 0.28)")
    dual_clip_c: float | None = Field(3.0, description="dual clip for A < 0 (Ye et al. 2020); None: off")
    tis: bool = Field(False, description="token-level truncated IS against the rollout engine")
    tis_cap: float = Field(2.0, gt=0.0, description="TIS weights are clipped to [0, tis_cap]")
    up: bool = Field(False, description="UP variant: A > 0 unclipped through pi / sg(pi)")
    kl_beta: float = Field(0.0, ge=0.0, description="KL coefficient; 0 turns the KL term off")
    kl_estimator: Literal["k1", "k2", "k3"] = "k2"
    kl_placement: Literal["loss", "reward"] = "loss"
    aggregation: str = "token-mean"
    norm_len: int | None = Field(
        None, ge=1, description="constant token normaliser for seq-mean-token-sum-norm / dr_grpo"
    )

    @model_validator(mode="after")
    def _check(self) -> LossConfig:
        if self.dual_clip_c is not None and self.dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c must be > 1 (got {self.dual_clip_c}); use null to turn it off")
        return self


class OptimConfig(StrictModel):
    """AdamW, or Muon on 2-D hidden matrices plus AdamW for the rest (``build_optimizers``)."""

    lr: float = Field(3e-4, gt=0.0)
    weight_decay: float = Field(0.01, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0.0)
    muon: bool = False
    muon_lr: float | None = Field(None, gt=0.0, description="None: same as lr (RMS matched to AdamW)")
    muon_momentum: float = Field(0.95, ge=0.0, lt=1.0)
    adamw_name_patterns: tuple[str, ...] = ("embed", "head", "unembed")
