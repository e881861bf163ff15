"""Run the world forward: exposure rounds, responses, the uniform-exposure test, canonical frames.

Every loop here is over rounds; each round is vectorised over all users' slates.
Random streams are spawned per purpose from the seed, so changing, say, the
number of rounds leaves the users and items unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import polars as pl

from data_pipelines.synth.config import SynthConfig
from data_pipelines.synth.exposure import gini, popularity_weights, sample_slates
from data_pipelines.synth.response import Responses, popularity, respond
from data_pipelines.synth.world import World, build_world

#: Event codes of generated rows, in the order they happen at one position.
EVENT_CODES: tuple[str, ...] = ("impression", "click", "fav", "cart", "buy")
MAIN_POLICY = "popularity"
UNIFORM_POLICY = "uniform"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Streams:
    users: np.random.Generator
    items: np.random.Generator
    exposure: np.random.Generator
    response: np.random.Generator
    time: np.random.Generator
    uniform_exposure: np.random.Generator
    uniform_response: np.random.Generator
    uniform_time: np.random.Generator


def streams(seed: int) -> Streams:
    children = np.random.SeedSequence(seed).spawn(8)
    return Streams(*(np.random.default_rng(c) for c in children))


@dataclass(frozen=True)
class Shown:
    """One row per impression (arrays [N]), with the draws that produced its events."""

    user: np.ndarray  # int64 user row
    item: np.ndarray  # int64 item row
    round: np.ndarray  # int64; rounds for the main logs, ``cfg.rounds`` for uniform_test
    position: np.ndarray  # int64, 1-based slot
    t0: np.ndarray  # int64 seconds after cfg.start: when the slate was shown
    interest: np.ndarray  # float64, s(u, i)
    popularity: np.ndarray  # float64, log(1 + n_i / mean n) at the time of the impression
    responses: Responses

    @staticmethod
    def concat(parts: list[Shown]) -> Shown:
        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in parts])

        r = Responses(
            **{
                k: np.concatenate([getattr(p.responses, k) for p in parts])
                for k in Responses.__dataclass_fields__
            }
        )
        names = [k for k in Shown.__dataclass_fields__ if k != "responses"]
        return Shown(**{k: cat(k) for k in names}, responses=r)


@dataclass(frozen=True)
class SynthData:
    """A generated world and its logs, in memory (``write`` puts it on disk).

    ``interactions`` and ``uniform`` are canonical interaction rows (no ``seq``:
    the ingest assigns it); ``items`` and ``users`` are canonical side tables.
    ``impressions`` holds, per impression, the truth behind its events; ``exposure``
    the logging policy per round.
    """

    config: SynthConfig
    world: World
    interactions: pl.DataFrame
    uniform: pl.DataFrame
    items: pl.DataFrame
    users: pl.DataFrame
    impressions: (
        pl.DataFrame
    )  # split, round, user_id, item_id, position, interest, popularity, noise, click...
    exposure: pl.DataFrame  # round, item_id, exposure_before, clicks_before, probability
    exposure_final: np.ndarray  # [n_items] int64, impressions per item in the main logs
    clicks_final: np.ndarray  # [n_items] int64, clicks per item in the main logs
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def user_vectors(self) -> np.ndarray:
        return self.world.user_vectors

    @property
    def item_vectors(self) -> np.ndarray:
        return self.world.item_vectors

    @property
    def conformity(self) -> np.ndarray:
        return self.world.conformity


def _session_starts(cfg: SynthConfig, rng: np.random.Generator, n: int, k: int, day: int) -> np.ndarray:
    """Seconds after cfg.start at which each of ``n`` users' slate of ``k`` is shown in round ``day``."""
    latest = cfg.round_seconds - cfg.event_gap_seconds * (k + 1)
    return day * cfg.round_seconds + rng.integers(0, latest + 1, n, dtype=np.int64)


def _show(
    cfg: SynthConfig, world: World, slates: np.ndarray, day: int, t0: np.ndarray, pop: np.ndarray, rng
) -> Shown:
    n, k = slates.shape
    user = np.repeat(np.arange(n, dtype=np.int64), k)
    item = slates.ravel().astype(np.int64)
    s = world.interest(user, item)
    return Shown(
        user=user,
        item=item,
        round=np.full(n * k, day, dtype=np.int64),
        position=np.tile(np.arange(1, k + 1, dtype=np.int64), n),
        t0=np.repeat(t0, k),
        interest=s,
        popularity=pop[item],
        responses=respond(cfg, rng, s, world.conformity[user], pop[item]),
    )


def simulate_rounds(cfg: SynthConfig, world: World, st: Streams) -> tuple[Shown, dict[str, np.ndarray]]:
    """The main logs: ``cfg.rounds`` rounds of popularity-driven slates.

    Returns the impressions and the logging-policy record: per round (``[n_rounds, n_items]``)
    exposure and clicks before the round and the draw probability.
    """
    n_users, n_items = cfg.n_users, cfg.n_items
    exposure = np.zeros(n_items, dtype=np.int64)
    clicks = np.zeros(n_items, dtype=np.int64)
    parts: list[Shown] = []
    record: dict[str, list[np.ndarray]] = {"exposure_before": [], "clicks_before": [], "probability": []}
    for r in range(cfg.rounds):
        p = popularity_weights(clicks, cfg.exposure_alpha, cfg.exposure_beta)
        record["exposure_before"].append(exposure.copy())
        record["clicks_before"].append(clicks.copy())
        record["probability"].append(p)
        slates = sample_slates(st.exposure, p, n_users, cfg.slate_size)
        t0 = _session_starts(cfg, st.time, n_users, cfg.slate_size, r)
        shown = _show(cfg, world, slates, r, t0, popularity(exposure), st.response)
        exposure += np.bincount(shown.item, minlength=n_items)
        clicks += np.bincount(shown.item[shown.responses.click], minlength=n_items)
        parts.append(shown)
    out = {k: np.stack(v) for k, v in record.items()}
    out["exposure_final"], out["clicks_final"] = exposure, clicks
    return Shown.concat(parts), out


def simulate_uniform(cfg: SynthConfig, world: World, st: Streams, exposure: np.ndarray) -> Shown:
    """uniform_test: ``uniform_slate_size`` items drawn uniformly at random per user, shown the
    day after the last round. Same response model; conformity reads the final exposure counts."""
    n_items = cfg.n_items
    slates = sample_slates(
        st.uniform_exposure, np.full(n_items, 1.0 / n_items), cfg.n_users, cfg.uniform_slate_size
    )
    t0 = _session_starts(cfg, st.uniform_time, cfg.n_users, cfg.uniform_slate_size, cfg.rounds)
    return _show(cfg, world, slates, cfg.rounds, t0, popularity(exposure), st.uniform_response)


def canonical_rows(cfg: SynthConfig, world: World, shown: Shown, *, uniform: bool) -> pl.DataFrame:
    """Canonical interaction rows: one impression per shown item, then its funnel events.

    Rows are in log order (ts, user, position, funnel step).
    """
    r = shown.responses
    gap = cfg.event_gap_seconds
    n = shown.user.size
    masks = (np.ones(n, dtype=bool), r.click, r.fav, r.cart, r.buy)
    offsets = (0, 0, gap // 4, gap // 2, 3 * gap // 4)  # after the click at t0 + gap * position
    idx = np.concatenate([np.flatnonzero(m) for m in masks])
    code = np.concatenate([np.full(np.count_nonzero(m), c, dtype=np.int64) for c, m in enumerate(masks)])
    off = np.asarray(offsets)[code]
    ts = shown.t0[idx] + np.where(code > 0, gap * shown.position[idx] + off, 0)
    user, item, pos = shown.user[idx], shown.item[idx], shown.position[idx]
    order = np.lexsort((code, pos, user, ts))
    idx, code, ts, user, item, pos = (a[order] for a in (idx, code, ts, user, item, pos))

    start_us = _micros(cfg.start)
    width = max(2, len(str(cfg.rounds)))
    is_buy = code == EVENT_CODES.index("buy")
    df = pl.DataFrame(
        {
            "user_id": world.user_ids.gather(user),
            "item_id": world.item_ids.gather(item),
            "ts": pl.Series(start_us + ts * 1_000_000).cast(pl.Datetime("us", "UTC")),
            "event": pl.Series(EVENT_CODES).gather(code),
            "value": pl.Series(np.where(is_buy, world.price[item], np.nan)).fill_nan(None),
            "category": pl.Series(world.category_names).gather(world.category[item]),
            "round": shown.round[idx],
            "position": pl.Series(pos, dtype=pl.Int32),
        }
    )
    tag = pl.lit("-test") if uniform else pl.lit("-r") + pl.col("round").cast(pl.String).str.zfill(width)
    session = (pl.col("user_id") + tag).alias("session_id")
    propensity = pl.lit(1.0 / cfg.n_items if uniform else None, dtype=pl.Float64).alias("propensity")
    policy = pl.lit(UNIFORM_POLICY if uniform else MAIN_POLICY).alias("logging_policy")
    return df.select(
        "user_id",
        "item_id",
        "ts",
        "event",
        "value",
        "category",
        session,
        session.alias("request_id"),
        "position",
        propensity,
        policy,
    )


def _micros(t: datetime) -> int:
    delta = t - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def impressions_frame(world: World, shown: Shown, split: str) -> pl.DataFrame:
    r = shown.responses
    return pl.DataFrame(
        {
            "split": pl.Series([split]).gather(np.zeros(shown.user.size, dtype=np.int64)),
            "round": shown.round,
            "user_id": world.user_ids.gather(shown.user),
            "item_id": world.item_ids.gather(shown.item),
            "position": pl.Series(shown.position, dtype=pl.Int32),
            "interest": shown.interest,
            "popularity": shown.popularity,
            "conformity": world.conformity[shown.user],
            "noise": r.noise,
            "click_logit": r.logit,
            "click": r.click,
            "cart": r.cart,
            "fav": r.fav,
            "buy": r.buy,
        }
    )


def generate(config: SynthConfig | None = None) -> SynthData:
    """Draw a world, its popularity-driven logs and a uniform-exposure test set. Deterministic in the seed."""
    cfg = config or SynthConfig()
    st = streams(cfg.seed)
    world = build_world(cfg, st.users, st.items)
    main, record = simulate_rounds(cfg, world, st)
    uni = simulate_uniform(cfg, world, st, record["exposure_final"])

    n_rounds, n_items = record["probability"].shape
    exposure = pl.DataFrame(
        {
            "round": np.repeat(np.arange(n_rounds, dtype=np.int64), n_items),
            "item_id": world.item_ids.gather(np.tile(np.arange(n_items), n_rounds)),
            "exposure_before": record["exposure_before"].ravel(),
            "clicks_before": record["clicks_before"].ravel(),
            "probability": record["probability"].ravel(),
        }
    )
    cumulative = np.vstack(
        [record["exposure_before"][1:], record["exposure_final"][None]]
    )  # after each round
    stats = {
        "exposure_gini_by_round": [round(gini(c), 4) for c in cumulative],
        "click_rate": round(float(main.responses.click.mean()), 4),
        "uniform_click_rate": round(float(uni.responses.click.mean()), 4),
        "impressions": int(main.user.size),
        "uniform_impressions": int(uni.user.size),
    }
    return SynthData(
        config=cfg,
        world=world,
        interactions=canonical_rows(cfg, world, main, uniform=False),
        uniform=canonical_rows(cfg, world, uni, uniform=True),
        items=world.items_frame(),
        users=world.users_frame(),
        impressions=pl.concat(
            [impressions_frame(world, main, "main"), impressions_frame(world, uni, "uniform")]
        ),
        exposure=exposure,
        exposure_final=record["exposure_final"],
        clicks_final=record["clicks_final"],
        stats=stats,
    )


def generate_logs(config: SynthConfig) -> pl.DataFrame:
    """Only the main logs as canonical rows (no uniform test, no truth frames): the fast path for CSV."""
    st = streams(config.seed)
    world = build_world(config, st.users, st.items)
    main, _ = simulate_rounds(config, world, st)
    return canonical_rows(config, world, main, uniform=False)
