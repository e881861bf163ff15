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


AGE_P: tuple[float, ...] = (0.15, 0.27, 0.23, 0.17, 0.11, 0.07)  # share of users per age band
DEVICE_P: tuple[float, ...] = (0.5, 0.3, 0.2)


@dataclass(frozen=True)
class Centroids:
    """The world's constants, drawn once with it: what any later user or item is built from
    (``truth/centroids.parquet``). float64 as drawn."""

    region: np.ndarray  # [n_regions, dim] m_region
    age_band: np.ndarray  # [len(AGE_BANDS), dim] g_age
    category: np.ndarray  # [n_categories, dim] q_category
    attribute: np.ndarray  # [n_attributes, dim] attribute directions e_j
    log_price: np.ndarray  # [n_categories] mean log price of the category
    projection: np.ndarray  # [dim, interest_features] w_j of the observable projections ([dim, 0] when off)


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
    centroids: Centroids
    #: Per-user price preference (``price_preference`` > 0), else None: [n_users] float64
    #: price_preference * rho_u (rho_u = -1: cheap, +1: premium) and [n_items] float64 x_i.
    price_taste: np.ndarray | None = None
    price_position: np.ndarray | None = None

    def interest(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """True interest s(u, i) = u . v_i / sqrt(dim) (+ price_taste_u * x_i) for index pairs; [N] float64."""
        s = interest(self.user_vectors[users], self.item_vectors[items])
        if self.price_taste is None or self.price_position is None:
            return s  # nothing added: the default world's floats stay bit for bit
        return s + self.price_taste[users] * self.price_position[items]

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


def user_vectors(
    cfg: SynthConfig, c: Centroids, region: np.ndarray, age_band: np.ndarray, personal: np.ndarray
) -> np.ndarray:
    """u = sqrt(w_r) m_region + sqrt(w_a) g_age + sqrt(1 - w_r - w_a) z for [n] indices, z [n, dim]; float64."""
    w_own = 1.0 - cfg.region_weight - cfg.age_weight
    return (
        np.sqrt(cfg.region_weight) * c.region[region]
        + np.sqrt(cfg.age_weight) * c.age_band[age_band]
        + np.sqrt(w_own) * personal
    )


def item_vectors(cfg: SynthConfig, c: Centroids, category: np.ndarray, personal: np.ndarray) -> np.ndarray:
    """v = sqrt(w_c) q_category + sqrt(1 - w_c) z for [n] categories, z [n, dim]; float64."""
    return np.sqrt(cfg.category_weight) * c.category[category] + np.sqrt(1 - cfg.category_weight) * personal


def top_attributes(cfg: SynthConfig, c: Centroids, v: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """The ``attributes_per_item`` largest of v . e_j / sqrt(dim) + attribute_noise * noise ([n, A]),
    as sorted attribute indices [n, k]."""
    affinity = v @ c.attribute.T / np.sqrt(cfg.dim) + cfg.attribute_noise * noise
    top = np.argsort(-affinity, axis=1, kind="stable")[:, : cfg.attributes_per_item]
    return np.sort(top, axis=1)


def prices(cfg: SynthConfig, c: Centroids, category: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """exp(log_price[category] + price_item_sd * noise), rounded to cents, at least 0.01; [n] float64."""
    price = np.round(np.exp(c.log_price[category] + cfg.price_item_sd * noise), 2)
    return np.maximum(price, 0.01)


def price_position(cfg: SynthConfig, price: np.ndarray) -> np.ndarray:
    """x_i = (log price_i - log price_median) / sqrt(price_category_sd^2 + price_item_sd^2): where an
    item's price sits in the world's price distribution, in its sds (about unit variance); [n] float64."""
    sd = float(np.hypot(cfg.price_category_sd, cfg.price_item_sd)) or 1.0
    return (np.log(price) - np.log(cfg.price_median)) / sd


def price_tastes(cfg: SynthConfig, n_users: int) -> np.ndarray:
    """price_preference * rho_u, rho_u = -1 or +1 with probability 1/2 each, from an own stream
    (child 9 of the seed: drawn only when asked for, so every other draw is unchanged); [n] float64."""
    rng = np.random.default_rng(np.random.SeedSequence(cfg.seed).spawn(10)[9])
    return cfg.price_preference * rng.choice(np.array([-1.0, 1.0]), n_users)


def category_p(cfg: SynthConfig) -> np.ndarray:
    """Category shares ~ 1 / rank**category_skew; [n_categories]."""
    sizes = 1.0 / np.arange(1, cfg.n_categories + 1) ** cfg.category_skew
    return sizes / sizes.sum()


def project(cfg: SynthConfig, c: Centroids, u: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Observable features u . w_j / sqrt(dim) + interest_feature_noise * noise; [n, interest_features]."""
    return u @ c.projection / np.sqrt(cfg.dim) + cfg.interest_feature_noise * noise


def build_world(cfg: SynthConfig, rng_users: np.random.Generator, rng_items: np.random.Generator) -> World:
    n_users, n_items, d = cfg.n_users, cfg.n_items, cfg.dim

    # Users: region and age centroids explain region_weight + age_weight of each coordinate's variance.
    # The draws keep their original order (the frozen default world depends on it).
    region = rng_users.integers(0, cfg.n_regions, n_users)
    age_band = rng_users.choice(len(AGE_BANDS), n_users, p=list(AGE_P))
    device = rng_users.choice(len(DEVICES), n_users, p=list(DEVICE_P))
    m_region = rng_users.standard_normal((cfg.n_regions, d))
    g_age = rng_users.standard_normal((len(AGE_BANDS), d))
    personal = rng_users.standard_normal((n_users, d))
    conformity = rng_users.gamma(cfg.conformity_shape, cfg.conformity_scale, n_users)

    # Items: category centroid + personal part; attributes = top directions (noisy); log-normal prices.
    category = rng_items.choice(cfg.n_categories, n_items, p=category_p(cfg))
    q_cat = rng_items.standard_normal((cfg.n_categories, d))
    item_personal = rng_items.standard_normal((n_items, d))
    directions = rng_items.standard_normal((cfg.n_attributes, d))
    attribute_noise = rng_items.standard_normal((n_items, cfg.n_attributes))
    log_mu = np.log(cfg.price_median) + cfg.price_category_sd * rng_items.standard_normal(cfg.n_categories)
    price_noise = rng_items.standard_normal(n_items)

    # Own stream (child 8 of the seed; generate's streams are children 0-7), drawn only when asked
    # for, so the default world and logs are unchanged.
    k = cfg.interest_features
    w, projection_noise = np.zeros((d, 0)), np.zeros((n_users, 0))
    if k:
        rng = np.random.default_rng(np.random.SeedSequence(cfg.seed).spawn(9)[8])
        w = rng.standard_normal((d, k))
        projection_noise = rng.standard_normal((n_users, k))
    c = Centroids(
        region=m_region, age_band=g_age, category=q_cat, attribute=directions, log_price=log_mu, projection=w
    )
    u = user_vectors(cfg, c, region, age_band, personal)
    v = item_vectors(cfg, c, category, item_personal)
    price = prices(cfg, c, category, price_noise)
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
        attributes=top_attributes(cfg, c, v, attribute_noise),
        price=price,
        category_names=names(CATEGORY_NAMES, "c", cfg.n_categories),
        attribute_names=names(ATTRIBUTE_NAMES, "a", cfg.n_attributes),
        projections=project(cfg, c, u, projection_noise),
        centroids=c,
        price_taste=price_tastes(cfg, n_users) if cfg.price_preference else None,
        price_position=price_position(cfg, price) if cfg.price_preference else None,
    )
