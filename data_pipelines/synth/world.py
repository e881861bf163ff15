"""The synthetic world: users (interest, conformity, observable features) and items.

Users' interest vectors are built from region and age-band centroids plus a
personal part, so the observable features predict part of a user's taste (a
profile encoder can place cold users). Items' latent vectors are built from a
category centroid plus a personal part; attributes are the directions an item
points to, so attributes predict part of an item's latent vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from data_pipelines.schema import features_expr
from data_pipelines.synth.config import SynthConfig

AGE_BANDS: tuple[str, ...] = ("18-24", "25-34", "35-44", "45-54", "55-64", "65+")
DEVICES: tuple[str, ...] = ("app", "mobile_web", "desktop")  # drawn independently of taste (a distractor)

#: Readable names for the first categories and attributes, so demo requests can name them.
CATEGORY_NAMES: tuple[str, ...] = (
    "running_shoes", "sneakers", "boots", "t_shirts", "jackets", "dresses", "jeans", "bags",
    "watches", "sunglasses", "headphones", "phones", "laptops", "cameras", "skincare", "makeup",
    "fragrance", "kitchen", "furniture", "toys",
)  # fmt: skip
ATTRIBUTE_NAMES: tuple[str, ...] = (
    "black", "white", "red", "blue", "green", "grey", "pink", "brown", "leather", "cotton", "wool",
    "denim", "waterproof", "lightweight", "breathable", "wireless", "vintage", "sport", "casual",
    "formal", "eco", "premium", "budget", "handmade", "kids", "unisex", "outdoor", "compact",
    "oversized", "slim", "classic", "limited", "organic", "vegan", "travel", "smart", "retro",
    "minimal", "bold", "bestseller",
)  # fmt: skip


def ids(prefix: str, n: int) -> pl.Series:
    """Zero-padded string ids ``prefix0000 ... prefix{n-1}`` (index = row of the truth arrays)."""
    width = max(4, len(str(n - 1)))
    digits = pl.Series("id", np.arange(n)).cast(pl.String).str.zfill(width)
    return (prefix + digits).rename("id")


def names(base: tuple[str, ...], prefix: str, n: int) -> list[str]:
    return [base[k] if k < len(base) else f"{prefix}{k:03d}" for k in range(n)]


@dataclass(frozen=True)
class World:
    """Everything about users and items that does not depend on the logs.

    Arrays are indexed by user / item row (the number in the id).
    """

    user_ids: pl.Series  # [n_users] "u0000", ...
    item_ids: pl.Series  # [n_items] "i0000", ...
    user_vectors: np.ndarray  # [n_users, dim] float32, interest u
    item_vectors: np.ndarray  # [n_items, dim] float32, latent v
    conformity: np.ndarray  # [n_users] float64, c_u >= 0
    region: np.ndarray  # [n_users] int, region index
    age_band: np.ndarray  # [n_users] int, index into AGE_BANDS
    device: np.ndarray  # [n_users] int, index into DEVICES
    category: np.ndarray  # [n_items] int, category index
    attributes: np.ndarray  # [n_items, attributes_per_item] int, attribute indices
    price: np.ndarray  # [n_items] float64
    category_names: list[str]
    attribute_names: list[str]
    projections: np.ndarray  # [n_users, interest_features] float64, observable noisy projections of u

    def interest(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """True interest s(u, i) = u . v_i / sqrt(dim) for index pairs; [N] float64."""
        return interest(self.user_vectors[users], self.item_vectors[items])

    def users_frame(self) -> pl.DataFrame:
        """Canonical users side table: user_id, features (list<struct<key, value>>)."""
        region = pl.Series([f"r{k:02d}" for k in range(int(self.region.max()) + 1)])
        flat = pl.DataFrame(
            {
                "user_id": self.user_ids,
                "age_band": pl.Series(AGE_BANDS).gather(self.age_band),
                "region": region.gather(self.region),
                "device": pl.Series(DEVICES).gather(self.device),
            }
            | {f"p{j}": np.round(self.projections[:, j], 3) for j in range(self.projections.shape[1])}
        )
        cols = [c for c in flat.columns if c != "user_id"]
        return flat.select("user_id", features_expr(cols).alias("features"))

    def items_frame(self) -> pl.DataFrame:
        """Canonical items side table: item_id, category, attributes (list[str]), price."""
        attrs = pl.Series(self.attribute_names, dtype=pl.String).gather(self.attributes.ravel())
        attrs = attrs.reshape(self.attributes.shape).cast(pl.List(pl.String))
        return pl.DataFrame(
            {
                "item_id": self.item_ids,
                "category": pl.Series(self.category_names).gather(self.category),
                "attributes": attrs,
                "price": self.price,
            }
        )


def interest(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Row-wise u . v / sqrt(dim) for [N, dim] arrays (unit variance when coordinates are N(0, 1))."""
    u64, v64 = u.astype(np.float64), v.astype(np.float64)
    return np.einsum("nd,nd->n", u64, v64) / np.sqrt(u.shape[1])


def build_world(cfg: SynthConfig, rng_users: np.random.Generator, rng_items: np.random.Generator) -> World:
    n_users, n_items, d = cfg.n_users, cfg.n_items, cfg.dim

    # Users: region and age centroids explain region_weight + age_weight of each coordinate's variance.
    region = rng_users.integers(0, cfg.n_regions, n_users)
    age_band = rng_users.choice(len(AGE_BANDS), n_users, p=[0.15, 0.27, 0.23, 0.17, 0.11, 0.07])
    device = rng_users.choice(len(DEVICES), n_users, p=[0.5, 0.3, 0.2])
    m_region = rng_users.standard_normal((cfg.n_regions, d))
    g_age = rng_users.standard_normal((len(AGE_BANDS), d))
    personal = rng_users.standard_normal((n_users, d))
    w_own = 1.0 - cfg.region_weight - cfg.age_weight
    u = (
        np.sqrt(cfg.region_weight) * m_region[region]
        + np.sqrt(cfg.age_weight) * g_age[age_band]
        + np.sqrt(w_own) * personal
    )
    conformity = rng_users.gamma(cfg.conformity_shape, cfg.conformity_scale, n_users)

    # Items: category centroid + personal part; attributes = top directions (noisy); log-normal prices.
    sizes = 1.0 / np.arange(1, cfg.n_categories + 1) ** cfg.category_skew
    category = rng_items.choice(cfg.n_categories, n_items, p=sizes / sizes.sum())
    q_cat = rng_items.standard_normal((cfg.n_categories, d))
    v = np.sqrt(cfg.category_weight) * q_cat[category] + np.sqrt(1 - cfg.category_weight) * (
        rng_items.standard_normal((n_items, d))
    )
    directions = rng_items.standard_normal((cfg.n_attributes, d))
    affinity = v @ directions.T / np.sqrt(d) + cfg.attribute_noise * rng_items.standard_normal(
        (n_items, cfg.n_attributes)
    )
    k = cfg.attributes_per_item
    top = np.argsort(-affinity, axis=1, kind="stable")[:, :k]
    log_mu = np.log(cfg.price_median) + cfg.price_category_sd * rng_items.standard_normal(cfg.n_categories)
    price = np.round(np.exp(log_mu[category] + cfg.price_item_sd * rng_items.standard_normal(n_items)), 2)
    price = np.maximum(price, 0.01)

    # Own stream (child 8 of the seed; generate's streams are children 0-7), drawn only when asked
    # for, so the default world and logs are unchanged.
    k = cfg.interest_features
    projections = np.zeros((n_users, 0))
    if k:
        rng = np.random.default_rng(np.random.SeedSequence(cfg.seed).spawn(9)[8])
        w = rng.standard_normal((d, k))
        projections = u @ w / np.sqrt(d) + cfg.interest_feature_noise * rng.standard_normal((n_users, k))

    return World(
        user_ids=ids("u", n_users),
        item_ids=ids("i", n_items),
        user_vectors=u.astype(np.float32),
        item_vectors=v.astype(np.float32),
        conformity=conformity,
        region=region,
        age_band=age_band,
        device=device,
        category=category,
        attributes=np.sort(top, axis=1),
        price=price,
        category_names=names(CATEGORY_NAMES, "c", cfg.n_categories),
        attribute_names=names(ATTRIBUTE_NAMES, "a", cfg.n_attributes),
        projections=projections,
    )
