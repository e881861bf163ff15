"""The generator's parameters, validated once. Defaults are frozen (see docs/synthetic.md).

Later work compares models on data drawn with these defaults, so a default is
never changed in place: a new behaviour gets a new field whose default keeps
the old one.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

from pydantic import Field, field_validator, model_validator

from parpo_core.config import StrictModel

#: Version of the generative model; bumped when the same config would draw different data.
GENERATOR_VERSION = 1


class SynthConfig(StrictModel):
    """Parameters of the synthetic world, logging policy and response model.

    Sizes, then the world (users, items), then exposure, then the response
    model, then time. The equations are in docs/synthetic.md.
    """

    seed: int = Field(0, ge=0, description="Seeds every random stream.")
    # Sizes
    n_users: int = Field(1000, ge=2, description="number of users")
    n_items: int = Field(2000, ge=2, description="number of items")
    dim: int = Field(16, ge=1, description="Latent dimension of interest vectors u and item vectors v.")
    n_categories: int = Field(20, ge=1, description="number of item categories")
    n_attributes: int = Field(40, ge=1, description="Attribute vocabulary size.")
    attributes_per_item: int = Field(
        3, ge=0, description="attributes drawn per item (top-k of v.e_j plus noise)"
    )
    rounds: int = Field(10, ge=1, description="Exposure rounds (one session per user per round).")
    slate_size: int = Field(10, ge=1, description="Impressions per user per round.")
    uniform_slate_size: int = Field(
        20, ge=1, description="Items shown at random to each user in uniform_test."
    )

    # Users: interest u = sqrt(w_r) m_region + sqrt(w_a) g_age + sqrt(1 - w_r - w_a) z
    n_regions: int = Field(8, ge=1, description="user regions (each with its own interest centre m_region)")
    region_weight: float = Field(0.3, ge=0, le=1, description="Share of interest variance set by region.")
    age_weight: float = Field(0.2, ge=0, le=1, description="Share of interest variance set by age band.")
    # Observable projections of the interest vector: features p0..p{k-1} = u.w_j / sqrt(dim) + noise
    interest_features: int = Field(
        0, ge=0, description="Numeric user features that are noisy projections of u (0: none, the default)."
    )
    interest_feature_noise: float = Field(1.0, ge=0, description="Noise sd of each projection (signal sd 1).")
    # Conformity c_u ~ Gamma(shape, scale)
    conformity_shape: float = Field(2.0, gt=0, description="Gamma shape of the conformity c_u")
    conformity_scale: float = Field(0.25, gt=0, description="Gamma scale of the conformity c_u")

    # Items: v = sqrt(w_c) q_category + sqrt(1 - w_c) z
    category_weight: float = Field(0.5, ge=0, le=1, description="Share of item variance set by category.")
    category_skew: float = Field(0.5, ge=0, description="Category sizes ~ 1 / rank**skew.")
    attribute_noise: float = Field(0.5, ge=0, description="Noise sd added to v.e_j / sqrt(dim) before top-k.")
    price_median: float = Field(30.0, gt=0, description="median item price")
    price_category_sd: float = Field(0.5, ge=0, description="sd of log price between categories.")
    price_item_sd: float = Field(0.4, ge=0, description="sd of log price within a category.")
    # Per-user price preference: s(u, i) += price_preference * rho_u * x_i, rho_u = +-1 (docs/synthetic.md)
    price_preference: float = Field(
        0.0,
        ge=0,
        description="Weight of each user's price preference (cheap or premium) in the true interest "
        "(0: none, the default).",
    )

    # Exposure (logging policy): P(i) ~ (clicks_i / mean clicks + alpha) ** beta, k distinct items per slate
    exposure_alpha: float = Field(1.0, gt=0, description="Smoothing, in units of the mean click count.")
    exposure_beta: float = Field(1.5, ge=0, description="Feedback exponent; > 1 is rich-get-richer.")

    # Response: click logit = bias + a * s(u, i) + c_u * log(1 + n_i / mean(n)) + N(0, noise_sd^2)
    click_bias: float = Field(-3.5, description="click logit intercept")
    interest_weight: float = Field(
        1.5, ge=0, description="a: weight of the true interest s(u, i) in the click logit"
    )
    noise_sd: float = Field(0.5, ge=0, description="sd of the click logit's Gaussian noise")
    # Funnel: P(event | parent) = sigmoid(logit(rate) + funnel_interest_weight * s(u, i))
    cart_rate: float = Field(0.25, gt=0, lt=1, description="P(cart | click) at s = 0.")
    fav_rate: float = Field(0.10, gt=0, lt=1, description="P(fav | click) at s = 0.")
    buy_rate: float = Field(0.40, gt=0, lt=1, description="P(buy | cart) at s = 0.")
    funnel_interest_weight: float = Field(
        1.0, ge=0, description="weight of s(u, i) in the cart/fav/buy logits"
    )

    # Time
    start: datetime = Field(datetime(2024, 1, 1, tzinfo=UTC), description="Start of round 0 (UTC).")
    round_seconds: int = Field(86_400, ge=60, description="Time step between rounds.")
    event_gap_seconds: int = Field(30, ge=4, description="Time between positions within a session.")

    @field_validator("start")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)

    @model_validator(mode="after")
    def _consistent(self) -> SynthConfig:
        if self.slate_size > self.n_items or self.uniform_slate_size > self.n_items:
            raise ValueError("slate_size and uniform_slate_size must be at most n_items")
        if self.attributes_per_item > self.n_attributes:
            raise ValueError("attributes_per_item must be at most n_attributes")
        if self.region_weight + self.age_weight > 1:
            raise ValueError("region_weight + age_weight must be at most 1")
        session = self.event_gap_seconds * (max(self.slate_size, self.uniform_slate_size) + 1)
        if session > self.round_seconds:
            raise ValueError(
                f"round_seconds ({self.round_seconds}) is shorter than one session "
                f"(event_gap_seconds * (slate size + 1) = {session})"
            )
        return self

    def digest(self) -> str:
        """A short stable hash of the config and generator version (for provenance)."""
        fields = self.model_dump(mode="json")
        if not self.interest_features:  # added later, off: digests of earlier configs stay as they were
            del fields["interest_features"], fields["interest_feature_noise"]
        if not self.price_preference:  # likewise
            del fields["price_preference"]
        blob = json.dumps({"v": GENERATOR_VERSION, **fields}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
