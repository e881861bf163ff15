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

    estimator: str = Field(
        "parpo",
        description="advantage estimator by name in ADVANTAGES (parpo, gdpo, gdpo_user, grpo, dr_grpo, rloo)",
    )
    weights: dict[str, float] = Field(
        default_factory=dict,
        description="weight of each reward component in the sum (task/<name>, preference); empty: 1 each",
    )
    eps: float = Field(1e-6, ge=0.0, description="added to every std / scale in a denominator")
    sample_std: bool = Field(False, description="False: population std (divide by n); True: n - 1")
    whiten: bool | None = Field(
        None, description="whiten the summed advantage over the batch (null: the estimator's own choice)"
    )
    # PARPO preference anchor (see parpo/algorithms/advantages.py::parpo)
    gamma: float = Field(1.0, ge=0.0, description="baseline floor = mu_u - gamma * sigma_u")
    kappa: float = Field(0.1, ge=0.0, description="scale floor = kappa * (|mu_u| + sigma_u)")
    n_min: int = Field(3, ge=1, description="anchor updates a user needs before the anchor is used")
    anchor_terms: Literal["both", "baseline", "scale"] = Field(
        "both",
        description="parpo's anchor terms in use (the ablation): both; baseline (b from the anchor, s the "
        "group std); scale (b the group mean, s from the anchor)",
    )
    anchor_alpha: float = Field(0.1, gt=0.0, le=1.0, description="EMA rate of the anchor store")
    preference_key: str = Field(
        "preference", description="the reward component normalised against the user anchor"
    )
    task_prefix: str = Field("task/", description="prefix of the task-quality reward components")


class LossConfig(StrictModel):
    """Policy loss (``LOSSES[cfg.name]``), its clipping, TIS, KL and aggregation."""

    name: str = Field("ppo", description="policy loss by name in LOSSES")
    clip_eps_low: float = Field(0.2, ge=0.0, lt=1.0, description="ratio lower bound 1 - eps_low")
    clip_eps_high: float = Field(0.2, ge=0.0, description="ratio upper bound 1 + eps_high (DAPO: 0.28)")
    dual_clip_c: float | None = Field(3.0, description="dual clip for A < 0 (Ye et al. 2020); None: off")
    tis: bool = Field(False, description="token-level truncated IS against the rollout engine")
    tis_cap: float = Field(2.0, gt=0.0, description="TIS weights are clipped to [0, tis_cap]")
    up: bool = Field(False, description="UP variant: A > 0 unclipped through pi / sg(pi)")
    kl_beta: float = Field(0.0, ge=0.0, description="KL coefficient; 0 turns the KL term off")
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k2", description="k1 | k2 | k3 (Schulman's estimators of KL to the reference policy)"
    )
    kl_placement: Literal["loss", "reward"] = Field(
        "loss", description="loss: a KL term in the loss; reward: a penalty on the reward"
    )
    aggregation: str = Field(
        "token-mean",
        description="how token losses become one number (AGGREGATIONS: token-mean, seq-mean-token-mean, ..., dr_grpo)",
    )
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

    lr: float = Field(3e-3, gt=0.0, description="learning rate (AdamW; Muon's too unless muon_lr is set)")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas")
    eps: float = Field(1e-8, gt=0.0, description="AdamW eps")
    muon: bool = Field(False, description="Muon for 2-D hidden weights, AdamW for the rest")
    muon_lr: float | None = Field(None, gt=0.0, description="None: same as lr (RMS matched to AdamW)")
    muon_momentum: float = Field(0.95, ge=0.0, lt=1.0, description="Muon momentum")
    critic_lr: float | None = Field(
        None, gt=0.0, description="AdamW learning rate of the value head (value_head.*); null: lr"
    )
    adamw_name_patterns: tuple[str, ...] = Field(
        ("embed", "head", "unembed"),
        description="parameters whose name contains one of these stay on AdamW under Muon",
    )


class ValueConfig(StrictModel):
    """Value-based credit (``VALUE_ESTIMATORS[cfg.estimator]``) and its critic (``CRITIC_LOSSES``)."""

    estimator: str = Field(
        "gae",
        description="by name in VALUE_ESTIMATORS (gae, skip_obs_gae, turn_gae, pact); in a policy config "
        "advantage.estimator selects it",
    )
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount per action token (per turn for turn_gae)")
    lam: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda of the policy advantage")
    critic_lam: float = Field(
        1.0, ge=0.0, le=1.0, description="skip_obs_gae: GAE lambda of the critic target"
    )
    length_alpha: float | None = Field(
        None, gt=0.0, description="skip_obs_gae: policy lambda 1 - 1/(alpha * length) per episode (SAO: 1.5)"
    )
    token_weights: Literal["uniform", "entropy"] = Field(
        "uniform", description="turn_gae: how a turn's advantage is shared by its tokens (mean weight 1)"
    )
    within_turn_decay: float = Field(
        1.0, gt=0.0, le=1.0, description="turn_gae: token weight x decay^(tokens after it in the turn)"
    )
    critic_loss: str = Field("mse", description="by name in CRITIC_LOSSES (mse, bce)")
    is_cap: float = Field(
        2.0, gt=0.0, description="pact: critic importance weights are clipped to [0, is_cap]"
    )
    anchored: bool = Field(
        True,
        description="the preference reward enters as (r - b_u) / s_u against the user anchor (PARPO); "
        "false: raw, the estimator's plain form",
    )


class ShapingConfig(StrictModel):
    """Penalties for over-long episodes and invalid tool calls (``shaping_rewards``), each clipped."""

    max_len: int | None = Field(None, ge=1, description="episode length budget; null: no over-long penalty")
    len_buffer: int = Field(1, ge=1, description="the penalty ramps from max_len - len_buffer to max_len")
    overlong_coef: float = Field(0.25, ge=0.0, description="over-long penalty at max_len (then linear)")
    invalid_coef: float = Field(0.1, ge=0.0, description="penalty per invalid tool call")
    clip: tuple[float, float] = Field((-0.25, 0.25), description="each penalty is clipped to [low, high]")

    @model_validator(mode="after")
    def _check(self) -> ShapingConfig:
        if self.clip[0] > self.clip[1]:
            raise ValueError(f"clip low {self.clip[0]} is above high {self.clip[1]}")
        if self.max_len is not None and self.len_buffer > self.max_len:
            raise ValueError(f"len_buffer {self.len_buffer} exceeds max_len {self.max_len}")
        return self


def select_value(
    advantage: AdvantageConfig, value: ValueConfig, value_set: bool, order: str
) -> ValueConfig | None:
    """The value section a training config runs with: ``advantage.estimator`` is the one selector,
    so a value-based name becomes ``value.estimator``; None when it names a group-relative one.
    ``value_set``: whether the config set ``value.estimator`` itself (it must then agree);
    ``order``: ``train.order``, which fits a critic unless ``joint``."""
    from parpo.algorithms.gae import VALUE_ESTIMATORS

    est = advantage.estimator
    if est in VALUE_ESTIMATORS and value.anchored and advantage.anchor_terms != "both":
        # value_reward's anchored preference (r - b_u) / s_u has no group statistic to fall back on
        raise ValueError(
            f"advantage.anchor_terms {advantage.anchor_terms} is parpo's group-track ablation; the "
            f"value-based estimator {est} uses both anchor terms (anchor_terms=both, or value.anchored=false)"
        )
    if est not in VALUE_ESTIMATORS:
        if order != "joint":
            raise ValueError(
                f"train.order {order} fits a critic: it needs a value-based advantage.estimator "
                f"(gae, skip_obs_gae, turn_gae, pact), not {est}"
            )
        return None
    if value_set and value.estimator != est:
        raise ValueError(
            f"value.estimator ({value.estimator}) differs from advantage.estimator ({est}); "
            "set advantage.estimator only"
        )
    return value.model_copy(update={"estimator": est})


def shaping_weights(advantage: AdvantageConfig, shaping: ShapingConfig | None) -> AdvantageConfig:
    """Explicit advantage weights name every component: the shaping penalties get weight 1 (they
    are clipped already) unless the config weighs them."""
    if shaping is None or not advantage.weights:
        return advantage
    from parpo.algorithms.shaping import INVALID_CALL, OVERLONG

    names = [INVALID_CALL, *([OVERLONG] if shaping.max_len is not None else [])]
    return advantage.model_copy(update={"weights": {**{k: 1.0 for k in names}, **advantage.weights}})
