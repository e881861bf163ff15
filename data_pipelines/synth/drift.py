"""A drifting world: more rounds of a written synthetic world, with new users, new items and
users whose taste turns (``parpo data synth --continue-from DIR``; docs/synthetic.md).

The world is read back from ``DIR/truth`` (vectors, conformity, items, the popularity state in
``items.parquet``, the world's constants in ``centroids.parquet``) and from DIR's users table
(region, age band, device, projections). A continuation of R rounds, N new users, M new items
and drift share x then does, with ``t0`` the number of rounds already played:

    new user  (ids u<U> .. u<U+N-1>)    drawn from the same model as the first users:
        region ~ U{0..n_regions-1}, age band, device as before, z ~ N(0, I_d)
        u = sqrt(w_r) m_region + sqrt(w_a) g_age + sqrt(1 - w_r - w_a) z,   c_u ~ Gamma(shape, scale)
    new item  (ids i<I> .. i<I+M-1>)    likewise: category ~ 1 / rank^skew, z ~ N(0, I_d)
        v = sqrt(w_c) q_category + sqrt(1 - w_c) z, attributes = top-k of v . e_j / sqrt(d) + noise,
        log price = log_price[category] + price_item_sd * N(0, 1); exposure and clicks start at 0
    drift     D = round(x * U) of the users that existed before (uniformly, without replacement)
        turn by the angle theta (default 90 degrees) in the plane of u and a random direction:
        g ~ N(0, I_d),  w = g - (g . u / u . u) u,  w <- w |u| / |w|
        u' = cos(theta) u + sin(theta) w            so |u'| = |u| and angle(u, u') = theta
        Every other user keeps u bit for bit. Features (region, age band, projections) and
        conformity stay: what the shop knows about a user goes stale for the drifted ones.
        Isotropic u stays isotropic, so the spread of s(u, i) over the population is unchanged.
    rounds    t0 .. t0 + R - 1, served by the same logging policy from where DIR left it:
        P(i) ~ (C_i / mean_j C_j + alpha)^beta and pop_i = log(1 + n_i / mean_j n_j) with C, n
        DIR's final clicks and impressions per item (0 for new items), then updated per round.
    uniform   uniform_test on day t0 + R (the day after the last round), in the drifted world.

The drift happens once, before round t0; the rounds, then the uniform test, follow. Time goes
on: round t covers [start + t * round_seconds, ...), so the new rows come after DIR's rows.
Random streams: ``SeedSequence(seed).spawn(9)``: children 0-7 as in ``generate`` (new users,
new items, exposure, responses, times, uniform x 3), child 8 the drift. ``seed`` defaults to
``derived_seed(DIR's seed, continuation number)``, so the same arguments give the same data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from pydantic import Field

from data_pipelines.dataset import Dataset
from data_pipelines.synth.config import GENERATOR_VERSION, SynthConfig
from data_pipelines.synth.generate import Frames, SynthData, play, streams
from data_pipelines.synth.truth import read_centroids, truth_dir
from data_pipelines.synth.world import (
    AGE_BANDS,
    AGE_P,
    ATTRIBUTE_NAMES,
    CATEGORY_NAMES,
    DEVICE_P,
    DEVICES,
    World,
    category_p,
    item_vectors,
    names,
    prices,
    project,
    top_attributes,
    user_vectors,
)
from parpo_core.config import StrictModel
from parpo_core.errors import DataError

#: truth/ files a continuation reads (centroids.parquet: written since the continuation exists).
NEEDED = (
    "user_vectors.parquet",
    "conformity.parquet",
    "items.parquet",
    "impressions.parquet",
    "exposure.parquet",
    "centroids.parquet",
)


class ContinueConfig(StrictModel):
    """What a continuation adds to a written world (equations in the module docstring)."""

    rounds: int = Field(ge=1, description="Rounds to play after DIR's last round.")
    new_users: int = Field(0, ge=0, description="Users who appear before the first new round.")
    new_items: int = Field(0, ge=0, description="Items added to the catalogue before the first new round.")
    interest_drift: float = Field(
        0.0, ge=0, le=1, description="Share of existing users whose interest turns."
    )
    drift_angle: float = Field(
        90.0, gt=0, le=180, description="Angle (degrees) a drifting interest turns by."
    )
    seed: int | None = Field(
        None, ge=0, description="Seed of the continuation; None: derived from DIR's seed and count."
    )


@dataclass(frozen=True)
class State:
    """A written world as its truth/ holds it: enough to play on."""

    config: SynthConfig
    world: World
    exposure: np.ndarray  # [I] int64, impressions per item in the main logs so far
    clicks: np.ndarray  # [I] int64, clicks per item in the main logs so far
    rounds: int  # rounds played so far (the next round's number)
    continuations: list[dict[str, Any]]
    stats: dict[str, Any]  # the first generation's statistics
    impressions: pl.DataFrame  # truth of every main-log impression so far
    exposure_log: pl.DataFrame  # the logging policy per round so far
    drift: pl.DataFrame | None  # earlier drift records
    fingerprint: str  # DIR's dataset fingerprint


def derived_seed(seed: int, continuation: int) -> int:
    """The default seed of continuation number ``continuation`` (1, 2, ...) of a world seeded ``seed``."""
    return int(np.random.SeedSequence([seed, continuation]).generate_state(1)[0])  # uint32


def load_state(root: str | Path) -> State:
    """Read back the world of the synthetic dataset ``root``; one ``DataError`` line when it cannot."""
    root = Path(root)
    try:
        tdir = truth_dir(root)
    except DataError:
        raise DataError(
            f"{root}: not a synthetic dataset (no truth/meta.json); --continue-from takes a folder "
            "written by `parpo data synth`"
        ) from None
    if tdir != root / "truth":
        raise DataError(f"{root}: give the dataset folder (the one holding truth/), not truth/ itself")
    ds = Dataset(root)
    meta = json.loads((tdir / "meta.json").read_text())
    missing = [f for f in NEEDED if not (tdir / f).is_file()]
    if missing:
        raise DataError(
            f"{tdir}: lacks {', '.join(missing)}, which a continuation needs (written by `parpo data synth` "
            "since continuations exist); write the world again with this version to continue it"
        )
    if meta.get("generator_version") != GENERATOR_VERSION:
        raise DataError(
            f"{tdir}: generator_version {meta.get('generator_version')} is not {GENERATOR_VERSION}; "
            "write the world again with this version to continue it"
        )
    cfg = SynthConfig.model_validate(meta["config"])
    if cfg.price_preference:
        raise DataError(
            f"{tdir}: continuing a world with price_preference ({cfg.price_preference}) is not supported yet"
        )
    users = pl.read_parquet(tdir / "user_vectors.parquet")
    conformity = pl.read_parquet(tdir / "conformity.parquet")
    items = pl.read_parquet(tdir / "items.parquet")
    for kind, known in (("users", users["user_id"]), ("items", items["item_id"])):
        extra = ds.idmap(kind).filter(~pl.col("id").is_in(known.implode()))
        if extra.height:
            raise DataError(
                f"{root}: {extra.height} {kind} of the dataset are not in truth/ (first {extra['id'][0]!r}; "
                "logs appended after synthesis?); only a synthetic world can be continued"
            )
    if not users["user_id"].equals(conformity["user_id"]):
        raise DataError(f"{tdir}: user_vectors.parquet and conformity.parquet list different users")
    demo = _demographics(ds.users(), users["user_id"], cfg.interest_features)
    category_names = names(CATEGORY_NAMES, "c", cfg.n_categories)
    attribute_names = names(ATTRIBUTE_NAMES, "a", cfg.n_attributes)
    sizes = {
        "region": cfg.n_regions,
        "age_band": len(AGE_BANDS),
        "category": cfg.n_categories,
        "attribute": cfg.n_attributes,
        "projection": cfg.interest_features,
    }
    world = World(
        user_ids=users["user_id"].rename("id"),
        item_ids=items["item_id"].rename("id"),
        user_vectors=_matrix(users["vector"], cfg.dim),
        item_vectors=_matrix(items["vector"], cfg.dim),
        conformity=conformity["conformity"].to_numpy(),
        region=demo["region"].to_numpy(),
        age_band=demo["age_band"].to_numpy(),
        device=demo["device"].to_numpy(),
        category=_positions(items["category"], category_names, "category"),
        attributes=_positions(items["attributes"].explode(), attribute_names, "attribute").reshape(
            items.height, cfg.attributes_per_item
        ),
        price=items["price"].to_numpy(),
        category_names=category_names,
        attribute_names=attribute_names,
        projections=demo.select(f"p{j}" for j in range(cfg.interest_features)).to_numpy().astype(np.float64)
        if cfg.interest_features
        else np.zeros((users.height, 0)),
        centroids=read_centroids(pl.read_parquet(tdir / "centroids.parquet"), cfg.dim, sizes),
    )
    continuations = meta.get("continuations", [])
    last = continuations[-1] if continuations else None
    drift_path = tdir / "drift.parquet"
    return State(
        config=cfg,
        world=world,
        exposure=items["exposure"].to_numpy().astype(np.int64),
        clicks=items["clicks"].to_numpy().astype(np.int64),
        rounds=last["first_round"] + last["rounds"] if last else cfg.rounds,
        continuations=continuations,
        stats=meta.get("stats", {}),
        impressions=pl.read_parquet(tdir / "impressions.parquet").filter(pl.col("split") == "main"),
        exposure_log=pl.read_parquet(tdir / "exposure.parquet"),
        drift=pl.read_parquet(drift_path) if drift_path.is_file() else None,
        fingerprint=ds.fingerprint,
    )


def _matrix(col: pl.Series, dim: int) -> np.ndarray:
    return col.list.to_array(dim).to_numpy().astype(np.float32, copy=False).reshape(col.len(), dim)


def _positions(values: pl.Series, vocabulary: list[str], kind: str) -> np.ndarray:
    """Index of each value in ``vocabulary``; an unknown value is a ``DataError``."""
    index = pl.DataFrame({"v": vocabulary, "k": np.arange(len(vocabulary), dtype=np.int64)})
    found = values.rename("v").to_frame().join(index, on="v", how="left", maintain_order="left")
    bad = found.filter(pl.col("k").is_null())
    if bad.height:
        raise DataError(f"truth/items.parquet: {kind} {bad['v'][0]!r} is not in the config's vocabulary")
    return found["k"].to_numpy()


def _demographics(users: pl.DataFrame, user_ids: pl.Series, n_features: int) -> pl.DataFrame:
    """region, age_band, device indices (and p0.. features) of ``user_ids``, in that order, parsed
    from the dataset's users table (what ``World.users_frame`` wrote)."""
    keys = ["age_band", "region", "device", *(f"p{j}" for j in range(n_features))]
    flat = (
        users.select("user_id", "features")
        .explode("features")
        .unnest("features")
        .filter(pl.col("key").is_in(keys))
        .pivot(on="key", index="user_id", values="value", aggregate_function="first")
    )
    absent = [k for k in keys if k not in flat.columns]
    out = user_ids.rename("user_id").to_frame().join(flat, on="user_id", how="left", maintain_order="left")
    if absent or out.select(pl.any_horizontal(pl.col(keys).is_null()).any()).item():
        raise DataError(
            f"users.parquet: a user lacks one of the features {keys} the generator wrote; "
            "only a synthetic world can be continued"
        )
    try:
        return out.select(
            pl.col("region").str.slice(1).cast(pl.Int64),
            pl.col("age_band").replace_strict(list(AGE_BANDS), range(len(AGE_BANDS)), return_dtype=pl.Int64),
            pl.col("device").replace_strict(list(DEVICES), range(len(DEVICES)), return_dtype=pl.Int64),
            *(pl.col(f"p{j}").cast(pl.Float64) for j in range(n_features)),
        )
    except pl.exceptions.PolarsError as e:
        raise DataError(f"users.parquet: a feature the generator wrote does not parse ({e})") from None


def more_ids(existing: pl.Series, prefix: str, n: int) -> pl.Series:
    """``n`` ids after ``existing`` (``prefix`` + row number, padded like the existing ones)."""
    width = existing.str.len_chars().max() - len(prefix) if existing.len() else 4
    start = existing.len()
    digits = pl.Series("id", np.arange(start, start + n)).cast(pl.String).str.zfill(width)
    return (prefix + digits).rename("id")


def grow(
    cfg: SynthConfig,
    world: World,
    rng_users: np.random.Generator,
    rng_items: np.random.Generator,
    n_users: int,
    n_items: int,
) -> World:
    """``world`` with ``n_users`` users and ``n_items`` items appended, drawn from the same model."""
    c, d = world.centroids, cfg.dim
    region = rng_users.integers(0, cfg.n_regions, n_users)
    age_band = rng_users.choice(len(AGE_BANDS), n_users, p=list(AGE_P))
    device = rng_users.choice(len(DEVICES), n_users, p=list(DEVICE_P))
    u = user_vectors(cfg, c, region, age_band, rng_users.standard_normal((n_users, d)))
    conformity = rng_users.gamma(cfg.conformity_shape, cfg.conformity_scale, n_users)
    projections = project(cfg, c, u, rng_users.standard_normal((n_users, cfg.interest_features)))
    category = rng_items.choice(cfg.n_categories, n_items, p=category_p(cfg))
    v = item_vectors(cfg, c, category, rng_items.standard_normal((n_items, d)))
    attributes = top_attributes(cfg, c, v, rng_items.standard_normal((n_items, cfg.n_attributes)))
    price = prices(cfg, c, category, rng_items.standard_normal(n_items))
    return replace(
        world,
        user_ids=pl.concat([world.user_ids, more_ids(world.user_ids, "u", n_users)]),
        item_ids=pl.concat([world.item_ids, more_ids(world.item_ids, "i", n_items)]),
        user_vectors=np.vstack([world.user_vectors, u.astype(np.float32)]),
        item_vectors=np.vstack([world.item_vectors, v.astype(np.float32)]),
        conformity=np.concatenate([world.conformity, conformity]),
        region=np.concatenate([world.region, region]),
        age_band=np.concatenate([world.age_band, age_band]),
        device=np.concatenate([world.device, device]),
        category=np.concatenate([world.category, category]),
        attributes=np.vstack([world.attributes, attributes]),
        price=np.concatenate([world.price, price]),
        projections=np.vstack([world.projections, projections]),
    )


def rotate(u: np.ndarray, g: np.ndarray, angle: float) -> np.ndarray:
    """Turn each row of ``u`` [n, d] by ``angle`` (radians) towards the part of ``g`` [n, d]
    orthogonal to it; norms are kept. Returns [n, d] float64."""
    u, g = u.astype(np.float64), g.astype(np.float64)
    w = g - (np.einsum("nd,nd->n", g, u) / np.einsum("nd,nd->n", u, u))[:, None] * u
    w *= (np.linalg.norm(u, axis=1) / np.linalg.norm(w, axis=1))[:, None]
    return np.cos(angle) * u + np.sin(angle) * w


def drift_users(
    u: np.ndarray, rng: np.random.Generator, share: float, angle_degrees: float
) -> tuple[np.ndarray, np.ndarray]:
    """Turn ``round(share * n)`` random rows of ``u`` [n, d] float32; returns (new u [n, d] float32,
    the turned rows [D] int64, sorted). The other rows are returned unchanged."""
    n = u.shape[0]
    rows = np.sort(rng.choice(n, int(np.floor(share * n + 0.5)), replace=False)).astype(np.int64)
    out = u.copy()
    out[rows] = rotate(u[rows], rng.standard_normal((rows.size, u.shape[1])), np.radians(angle_degrees))
    return out, rows


def continue_world(state: State, spec: ContinueConfig) -> tuple[SynthData, SynthData]:
    """Play ``spec`` on ``state``. Returns (the new part: rows of the new rounds, the new uniform
    test, their truth; the whole world for truth/: every main impression and round so far)."""
    cfg, count = state.config, len(state.continuations) + 1
    seed = derived_seed(cfg.seed, count) if spec.seed is None else spec.seed
    st = streams(seed)
    world = grow(cfg, state.world, st.users, st.items, spec.new_users, spec.new_items)
    n_old = state.world.user_ids.len()
    rng_drift = np.random.default_rng(np.random.SeedSequence(seed).spawn(9)[8])
    turned, rows = drift_users(world.user_vectors[:n_old], rng_drift, spec.interest_drift, spec.drift_angle)
    world = replace(world, user_vectors=np.vstack([turned, world.user_vectors[n_old:]]))

    pad = spec.new_items
    first = state.rounds
    rounds = range(first, first + spec.rounds)
    frames = Frames()
    logs = play(
        cfg, world, st, frames, rounds, np.pad(state.exposure, (0, pad)), np.pad(state.clicks, (0, pad))
    )
    new = frames.data(cfg, world, logs)

    drift = pl.DataFrame(
        {
            "continuation": pl.repeat(count, rows.size, eager=True, dtype=pl.Int64),
            "round": pl.repeat(first, rows.size, eager=True, dtype=pl.Int64),
            "user_id": world.user_ids.gather(rows),
            "vector_before": pl.Series(state.world.user_vectors[rows]).cast(pl.List(pl.Float32)),
        }
    )
    record_ = {
        "continuation": count,
        "seed": seed,
        "seed_derived": spec.seed is None,
        "first_round": first,
        "rounds": spec.rounds,
        "new_users": spec.new_users,
        "new_items": spec.new_items,
        "interest_drift": spec.interest_drift,
        "drift_angle": spec.drift_angle,
        "drifted_users": int(rows.size),
        "users": world.user_ids.len(),
        "items": world.item_ids.len(),
        "parent_fingerprint": state.fingerprint,
        "stats": new.stats,
    }
    whole = replace(
        new,
        impressions=pl.concat([state.impressions, new.impressions], how="vertical_relaxed"),
        exposure=pl.concat([state.exposure_log, new.exposure], how="vertical_relaxed"),
        stats=state.stats,
        continuations=[*state.continuations, record_],
        drift=pl.concat([f for f in (state.drift, drift) if f is not None], how="vertical_relaxed"),
    )
    return new, whole
