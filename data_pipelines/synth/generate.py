"""Run the world forward: exposure rounds, responses, the uniform-exposure test, canonical frames.

Every loop here is over rounds; each round is vectorised over all users' slates.
Random streams are spawned per purpose from the seed, so changing, say, the
number of rounds leaves the users and items unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

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

    def part(self, rows: slice) -> Shown:
        """The impressions ``rows`` (views of the arrays)."""
        r = Responses(**{k: getattr(self.responses, k)[rows] for k in Responses.__dataclass_fields__})
        names = [k for k in Shown.__dataclass_fields__ if k != "responses"]
        return Shown(**{k: getattr(self, k)[rows] for k in names}, responses=r)


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
    impressions: pl.DataFrame  # per impression: split, round, ids, interest, popularity, draws
    exposure: pl.DataFrame  # round, item_id, exposure_before, clicks_before, probability
    exposure_final: np.ndarray  # [n_items] int64, impressions per item in the main logs
    clicks_final: np.ndarray  # [n_items] int64, clicks per item in the main logs
    stats: dict[str, Any] = field(default_factory=dict)
    #: One record per continuation the world went through (``data_pipelines.synth.drift``); [] when fresh.
    continuations: list[dict[str, Any]] = field(default_factory=list)
    #: Continued worlds: continuation, round, user_id, vector_before of every drifted user; None when fresh.
    drift: pl.DataFrame | None = None

    @property
    def user_vectors(self) -> np.ndarray:
        return self.world.user_vectors

    @property
    def item_vectors(self) -> np.ndarray:
        return self.world.item_vectors

    @property
    def conformity(self) -> np.ndarray:
        return self.world.conformity


def _sessions(
    cfg: SynthConfig, rng: np.random.Generator, n_users: int, k: int, day: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every user's session in round ``day``, in order of arrival.

    Returns (users [U] int64, a random order; starts [U] int64 seconds after cfg.start,
    non-decreasing). Generating slates in arrival order keeps the rows in log order.
    """
    latest = cfg.round_seconds - cfg.event_gap_seconds * (k + 1)
    users = rng.permutation(n_users).astype(np.int64)
    starts = np.sort(rng.integers(0, latest + 1, n_users, dtype=np.int64))
    return users, day * cfg.round_seconds + starts


def _show(
    cfg: SynthConfig,
    world: World,
    users: np.ndarray,
    slates: np.ndarray,
    day: int,
    t0: np.ndarray,
    pop: np.ndarray,
    rng: np.random.Generator,
) -> Shown:
    """Impressions of ``slates`` ([n, k] items) shown to ``users`` ([n]) at ``t0`` ([n]), with responses."""
    n, k = slates.shape
    user = np.repeat(users, k)
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


class Sink(Protocol):
    """Where ``play`` puts the frames of each round as the round ends. ``wants_impressions``:
    whether ``add`` gets the truth's impression frames (None otherwise, and none are built)."""

    wants_impressions: bool

    def add(self, split: str, rows: pl.DataFrame, impressions: pl.DataFrame | None) -> None:
        """``split``: 'main' (the logs) or 'uniform' (the uniform test); ``rows``: canonical
        interaction rows of consecutive sessions of one round, in log order; ``impressions``:
        their ``impressions_frame``."""


@dataclass(frozen=True)
class Logs:
    """What a run keeps besides its rows: the logging-policy record and the statistics."""

    exposure: pl.DataFrame  # round, item_id, exposure_before, clicks_before, probability ([rounds * I] rows)
    exposure_final: np.ndarray  # [I] int64, impressions per item in the main logs
    clicks_final: np.ndarray  # [I] int64, clicks per item in the main logs
    stats: dict[str, Any]


def play(
    cfg: SynthConfig,
    world: World,
    st: Streams,
    sink: Sink,
    rounds: range | None = None,
    exposure: np.ndarray | None = None,
    clicks: np.ndarray | None = None,
    *,
    uniform: bool = True,
) -> Logs:
    """The main logs, then the uniform test (unless ``uniform`` is false: ``stats`` then has no
    uniform keys), into ``sink`` one round at a time.

    ``rounds`` (default ``range(cfg.rounds)``) of popularity-driven slates, starting from
    impressions ``exposure`` and ``clicks`` per item ([I] int64; default none); the uniform test
    is shown on day ``rounds.stop``. Only the per-item counters and the logging-policy record
    ([rounds, I]) outlive a round, so memory is bounded by one round's draws (arrays [U * k]) and
    one frame of ``SESSIONS_PER_FRAME`` sessions, not by the log.
    """
    rounds = range(cfg.rounds) if rounds is None else rounds
    n_users, n_items = world.user_ids.len(), world.item_ids.len()
    exposure = np.zeros(n_items, dtype=np.int64) if exposure is None else exposure.copy()
    clicks = np.zeros(n_items, dtype=np.int64) if clicks is None else clicks.copy()
    record: dict[str, list[np.ndarray]] = {"exposure_before": [], "clicks_before": [], "probability": []}
    width = max(2, len(str(rounds[-1])))  # session ids: "-r" + the round, zero-padded alike in every round
    impressions = clicked = 0
    for r in rounds:
        p = popularity_weights(clicks, cfg.exposure_alpha, cfg.exposure_beta)
        record["exposure_before"].append(exposure.copy())
        record["clicks_before"].append(clicks.copy())
        record["probability"].append(p)
        users, t0 = _sessions(cfg, st.time, n_users, cfg.slate_size, r)
        slates = sample_slates(st.exposure, p, n_users, cfg.slate_size)
        shown = _show(cfg, world, users, slates, r, t0, popularity(exposure), st.response)
        exposure += np.bincount(shown.item, minlength=n_items)
        clicks += np.bincount(shown.item[shown.responses.click], minlength=n_items)
        impressions, clicked = impressions + shown.user.size, clicked + int(shown.responses.click.sum())
        _emit(cfg, world, shown, sink, "main", f"-r{r:0{width}d}")
        del shown  # the round's draws are not kept into the next round or the uniform test
    before = {k: np.stack(v) for k, v in record.items()}
    after = np.vstack([before["exposure_before"][1:], exposure[None]])  # [rounds, n_items]
    stats: dict[str, Any] = {
        "exposure_gini_by_round": [round(gini(c), 4) for c in after],
        "click_rate": round(clicked / impressions, 4),
    }
    if uniform:
        uni = simulate_uniform(cfg, world, st, exposure, rounds.stop)
        _emit(cfg, world, uni, sink, "uniform", "-test")
        stats["uniform_click_rate"] = round(float(uni.responses.click.mean()), 4)
    stats["impressions"] = impressions
    if uniform:
        stats["uniform_impressions"] = int(uni.user.size)
    frame = pl.DataFrame(
        {
            "round": np.repeat(np.asarray(rounds, dtype=np.int64), n_items),
            "item_id": world.item_ids.gather(np.tile(np.arange(n_items), len(rounds))),
            **{k: v.ravel() for k, v in before.items()},
        }
    )
    return Logs(frame, exposure, clicks, stats)


#: Sessions per frame handed to a sink: a round of a large world reaches it in parts.
SESSIONS_PER_FRAME = 1 << 16


def _emit(cfg: SynthConfig, world: World, shown: Shown, sink: Sink, split: str, session: str) -> None:
    """Hand ``shown`` (one round, or the uniform test) to ``sink`` as frames of at most
    ``SESSIONS_PER_FRAME`` sessions, in order: the rows do not depend on where it is cut, as a
    session's rows follow its impressions and sessions follow each other."""
    uniform = split == "uniform"
    k = cfg.uniform_slate_size if uniform else cfg.slate_size
    step = SESSIONS_PER_FRAME * k
    for start in range(0, shown.user.size, step):
        part = shown.part(slice(start, start + step))
        sink.add(
            split,
            canonical_rows(cfg, world, part, session, uniform=uniform),
            impressions_frame(world, part, split) if sink.wants_impressions else None,
        )


def simulate_uniform(cfg: SynthConfig, world: World, st: Streams, exposure: np.ndarray, day: int) -> Shown:
    """uniform_test: ``uniform_slate_size`` distinct items drawn uniformly at random per user, shown
    on ``day`` (the day after the last round). Same response model; conformity reads the final
    exposure counts."""
    n_users, n_items = world.user_ids.len(), world.item_ids.len()
    users, t0 = _sessions(cfg, st.uniform_time, n_users, cfg.uniform_slate_size, day)
    p = np.full(n_items, 1.0 / n_items)
    slates = sample_slates(st.uniform_exposure, p, n_users, cfg.uniform_slate_size)
    return _show(cfg, world, users, slates, day, t0, popularity(exposure), st.uniform_response)


def canonical_rows(
    cfg: SynthConfig, world: World, shown: Shown, session: str, *, uniform: bool
) -> pl.DataFrame:
    """Canonical interaction rows: per session its impressions (at the session start), then the
    funnel events by position; sessions in order of start, so ``ts`` is non-decreasing per user.

    ``shown`` holds one round's (or the uniform test's) sessions, of equal length, in arrival order
    (as simulated); a session's id is its user's id + ``session``.
    """
    r = shown.responses
    k = cfg.uniform_slate_size if uniform else cfg.slate_size
    gap = cfg.event_gap_seconds
    n = shown.user.size
    # Event rows ordered by (impression, step); merged after their session's impressions.
    flat = np.flatnonzero(np.stack([r.click, r.fav, r.cart, r.buy], axis=1))
    imp = np.concatenate([np.arange(n, dtype=np.int64), flat // 4])
    code = np.concatenate([np.zeros(n, dtype=np.int64), flat % 4 + 1])
    order = np.argsort(imp // k, kind="stable")  # two sorted runs: a linear merge
    imp, code = imp[order], code[order]

    user, item, pos = shown.user[imp], shown.item[imp], shown.position[imp]
    offset = np.asarray([0, 0, gap // 4, gap // 2, 3 * gap // 4])[code]  # after the click at gap * pos
    ts = shown.t0[imp] + np.where(code > 0, gap * pos + offset, 0)
    session_ids = (world.user_ids + session).gather(user)
    is_buy = code == EVENT_CODES.index("buy")
    n_rows = imp.size
    return pl.DataFrame(
        {
            "user_id": world.user_ids.gather(user),
            "item_id": world.item_ids.gather(item),
            "ts": pl.Series(_micros(cfg.start) + ts * 1_000_000).cast(pl.Datetime("us", "UTC")),
            "event": pl.Series(EVENT_CODES).gather(code),
            "value": pl.Series(np.where(is_buy, world.price[item], np.nan)).fill_nan(None),
            "category": pl.Series(world.category_names).gather(world.category[item]),
            "session_id": session_ids,
            "request_id": session_ids,
            "position": pl.Series(pos, dtype=pl.Int32),
            "propensity": pl.repeat(
                1.0 / world.item_ids.len() if uniform else None, n_rows, dtype=pl.Float64, eager=True
            ),
            "logging_policy": pl.repeat(UNIFORM_POLICY if uniform else MAIN_POLICY, n_rows, eager=True),
        }
    )


def _micros(t: datetime) -> int:
    delta = t - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def impressions_frame(world: World, shown: Shown, split: str) -> pl.DataFrame:
    r = shown.responses
    return pl.DataFrame(
        {
            "split": pl.repeat(split, shown.user.size, eager=True),
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


class Frames:
    """A ``Sink`` that keeps every frame in memory: ``data`` concatenates them into a ``SynthData``
    (``impressions`` false: only the rows are kept, for ``generate_logs``)."""

    def __init__(self, impressions: bool = True) -> None:
        self.wants_impressions = impressions
        self.rows: dict[str, list[pl.DataFrame]] = {"main": [], "uniform": []}
        self.impressions: list[pl.DataFrame] = []

    def add(self, split: str, rows: pl.DataFrame, impressions: pl.DataFrame | None) -> None:
        self.rows[split].append(rows)
        if impressions is not None:
            self.impressions.append(impressions)

    def data(self, cfg: SynthConfig, world: World, logs: Logs) -> SynthData:
        return SynthData(
            config=cfg,
            world=world,
            interactions=pl.concat(self.rows["main"]),
            uniform=pl.concat(self.rows["uniform"]),
            items=world.items_frame(),
            users=world.users_frame(),
            impressions=pl.concat(self.impressions),
            exposure=logs.exposure,
            exposure_final=logs.exposure_final,
            clicks_final=logs.clicks_final,
            stats=logs.stats,
        )


def generate(config: SynthConfig | None = None) -> SynthData:
    """Draw a world, its popularity-driven logs and a uniform-exposure test set, in memory
    (``write`` streams the same rows to disk). Deterministic in the seed."""
    cfg = config or SynthConfig()
    st = streams(cfg.seed)
    world = build_world(cfg, st.users, st.items)
    frames = Frames()
    return frames.data(cfg, world, play(cfg, world, st, frames))


def generate_logs(config: SynthConfig) -> pl.DataFrame:
    """Only the main logs as canonical rows, the same as ``generate``'s (neither the truth's
    frames nor the uniform test are built): the path for CSV."""
    st = streams(config.seed)
    world = build_world(config, st.users, st.items)
    frames = Frames(impressions=False)
    play(config, world, st, frames, uniform=False)
    return pl.concat(frames.rows["main"])
