"""``truth/``: what the generator knows and a model can only estimate, and how to read it.

Layout of ``DIR/truth/`` (columns are also documented in ``meta.json``)::

    interest.parquet      user_id, item_id, interest   all pairs (or observed pairs, when huge)
    user_vectors.parquet  user_id, vector              interest vectors u (list<float32>)
    conformity.parquet    user_id, conformity          c_u >= 0
    items.parquet         item_id, vector, category, attributes, price, exposure, clicks
    impressions.parquet   per impression: split, round, user_id, item_id, position, interest,
                          popularity, conformity, noise, click_logit, click, cart, fav, buy
    exposure.parquet      per round and item: exposure_before, clicks_before, probability
    centroids.parquet     the world's constants (centroids, attribute directions, price levels,
                          projection weights): what later users and items are drawn from
    [drift.parquet]       continued worlds: each drifted user's vector before the drift
    meta.json README.md   config, equations, column docs, statistics, continuations

The true interest of any pair is ``u . v / sqrt(dim)`` through the stored vectors:
``true_interest(DIR, users, items)``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from data_pipelines.synth.config import GENERATOR_VERSION, SynthConfig
from data_pipelines.synth.generate import Logs, SynthData
from data_pipelines.synth.world import Centroids, World, price_position
from data_pipelines.synth.world import interest as row_interest
from parpo_core.durable import publish_dir, temp_sibling
from parpo_core.errors import DataError

#: Above this many user x item pairs, interest.parquet holds only the pairs in the logs.
ALL_PAIRS_LIMIT = 5_000_000

MODEL = {
    "interest": "s(u, i) = u . v_i / sqrt(dim)",
    "user_vector": "u = sqrt(region_weight) m_region + sqrt(age_weight) g_age + sqrt(1 - region_weight - age_weight) z",
    "item_vector": "v = sqrt(category_weight) q_category + sqrt(1 - category_weight) z",
    "conformity": "c_u ~ Gamma(conformity_shape, conformity_scale)",
    "exposure": "each slot of a slate draws item i w.p. ~ (clicks_i / mean_j clicks_j + exposure_alpha)^exposure_beta; repeats redrawn",
    "popularity": "pop_i = log(1 + n_i / mean_j n_j), n_i = impressions of i before the round (0 in round 0)",
    "click": "P(click) = sigmoid(click_bias + interest_weight * s + c_u * pop_i + eps), eps ~ N(0, noise_sd^2)",
    "funnel": "P(cart|click) = sigmoid(logit(cart_rate) + funnel_interest_weight * s); fav likewise; P(buy|cart) with buy_rate",
    "uniform_test": "uniform_slate_size distinct items uniformly at random per user; same response model, pop from final counts",
}

#: The price preference term (``price_preference`` > 0); in meta.json of such worlds only.
PRICE_MODEL = {
    "price_preference": "s(u, i) = u . v_i / sqrt(dim) + price_preference * rho_u * x_i, rho_u = +-1 w.p. 1/2, "
    "x_i = (log price_i - log price_median) / sqrt(price_category_sd^2 + price_item_sd^2)",
}

#: What a continuation adds (``data_pipelines.synth.drift``); in meta.json of continued worlds only.
CONTINUATION_MODEL = {
    "new_users_items": "drawn by the same equations from centroids.parquet; new items start with 0 exposure and clicks",
    "interest_drift": "round(x * U) earlier users, uniformly: u' = cos(theta) u + sin(theta) |u| w / |w|, w = g - (g . u / u . u) u, g ~ N(0, I_d)",
    "rounds": "numbered on from the last round, same logging policy from the final exposure and clicks, same response model",
}

COLUMNS = {
    "interest.parquet": {
        "user_id": "user id",
        "item_id": "item id",
        "interest": "s(u, i) (float32); about unit variance over random pairs",
    },
    "user_vectors.parquet": {"user_id": "user id", "vector": "interest vector u, list<float32>[dim]"},
    "conformity.parquet": {
        "user_id": "user id",
        "conformity": "c_u >= 0, weight of pop_i in the click logit",
    },
    "items.parquet": {
        "item_id": "item id",
        "vector": "latent vector v, list<float32>[dim]",
        "category": "category name",
        "attributes": "attribute names (top directions of v)",
        "price": "price",
        "exposure": "impressions in the main logs",
        "clicks": "clicks in the main logs",
    },
    "impressions.parquet": {
        "split": "'main' (the logs) or 'uniform' (uniform_test)",
        "round": "round (uniform_test: rounds)",
        "position": "1-based slot",
        "interest": "s(u, i)",
        "popularity": "pop_i at the time of the impression",
        "conformity": "c_u",
        "noise": "eps drawn for this impression",
        "click_logit": "the click logit including eps",
        "click/cart/fav/buy": "whether the event happened",
    },
    "centroids.parquet": {
        "kind": "region (m_region), age_band (g_age), category (q_category), attribute (e_j) or projection (w_j)",
        "index": "row within the kind (region / age band / category / attribute / feature number)",
        "vector": "the vector, list<float64>[dim]",
        "log_price": "category rows: mean log price of the category; null otherwise",
    },
    "price_preference.parquet": {
        "user_id": "user id",
        "rho": "rho_u: -1 (prefers cheap items) or +1 (premium); s(u, i) adds price_preference * rho_u * x_i",
    },
    "drift.parquet": {
        "continuation": "which continuation (1 = the first) rotated the vector",
        "round": "first round played with the new vector",
        "user_id": "user id",
        "vector_before": "interest vector u before the rotation, list<float32>[dim]",
    },
    "exposure.parquet": {
        "round": "round",
        "item_id": "item id",
        "exposure_before": "impressions before the round",
        "clicks_before": "clicks before the round",
        "probability": "single-draw probability of the item in the round's slates",
    },
}


def truth_dir(root: str | Path) -> Path:
    """``DIR/truth`` for a synthetic dataset folder, or ``root`` itself if it is a truth folder."""
    root = Path(root)
    for d in (root / "truth", root):
        if (d / "meta.json").is_file():
            return d
    raise DataError(f"{root}: no truth/meta.json (write a synthetic dataset with `parpo data synth`)")


def _vectors(a: np.ndarray) -> pl.Series:
    return pl.Series("vector", a).cast(pl.List(pl.Float32))


def write_truth(data: SynthData, dest: Path) -> dict[str, Any]:
    """Write ``truth/`` of a world held in memory (``write_truth_parts``)."""
    logs = Logs(data.exposure, data.exposure_final, data.clicks_final, data.stats)
    pairs = None if all_pairs(data.world) else observed_pairs(data.world, data.impressions)
    return write_truth_parts(
        dest, data.config, data.world, logs, data.impressions, pairs, data.continuations, data.drift
    )


def write_truth_parts(
    dest: Path,
    cfg: SynthConfig,
    w: World,
    logs: Logs,
    impressions: pl.DataFrame | Path,
    pairs: np.ndarray | None,
    continuations: list[dict[str, Any]] | None = None,
    drift: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """Write ``truth/`` atomically: staged in a sibling temp folder, fsynced, renamed into place.

    ``impressions``: the impressions frame, or a parquet file of it (moved into ``truth/``);
    ``pairs``: ``observed_pairs`` of the impressions, None when ``all_pairs(w)``; ``continuations``
    and ``drift``: a continued world's records (``data_pipelines.synth.drift``).
    """
    tmp = temp_sibling(dest)
    tmp.mkdir(parents=True)
    try:
        frames = {
            "user_vectors.parquet": pl.DataFrame({"user_id": w.user_ids, "vector": _vectors(w.user_vectors)}),
            "conformity.parquet": pl.DataFrame({"user_id": w.user_ids, "conformity": w.conformity}),
            "items.parquet": w.items_frame().select(
                "item_id",
                _vectors(w.item_vectors),
                "category",
                "attributes",
                "price",
                pl.Series("exposure", logs.exposure_final),
                pl.Series("clicks", logs.clicks_final),
            ),
            "interest.parquet": _interest_pairs(w, pairs),
            "impressions.parquet": impressions,
            "exposure.parquet": logs.exposure,
            "centroids.parquet": centroids_frame(w.centroids),
        }
        if drift is not None:
            frames["drift.parquet"] = drift
        if w.price_taste is not None:
            frames["price_preference.parquet"] = pl.DataFrame(
                {"user_id": w.user_ids, "rho": np.sign(w.price_taste).astype(np.int8)}
            )
        files = {}
        for name, df in frames.items():
            if isinstance(df, pl.DataFrame):
                df.write_parquet(tmp / name, compression="zstd")
                files[name] = {"rows": df.height}
            elif isinstance(df, Path):
                shutil.move(df, tmp / name)
                files[name] = {"rows": pq.read_metadata(tmp / name).num_rows}  # footer only, no handle kept
            else:
                files[name] = {"rows": write_frames(tmp / name, df)}
        meta = {
            "generator_version": GENERATOR_VERSION,
            # price_preference is left out when off: the default world's meta.json stays as it was
            "config": cfg.model_dump(
                mode="json", exclude=None if cfg.price_preference else {"price_preference"}
            ),
            "config_digest": cfg.digest(),
            "interest_pairs": "all" if pairs is None else "observed",
            "model": MODEL
            | (CONTINUATION_MODEL if continuations else {})
            | (PRICE_MODEL if w.price_taste is not None else {}),
            "columns": {name: cols for name, cols in COLUMNS.items() if name in files},
            "stats": logs.stats,
            "files": files,
        }
        if continuations:
            meta["continuations"] = continuations
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        (tmp / "README.md").write_text(_readme(meta))
        publish_dir(tmp, dest, replace=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


#: Kinds of rows in centroids.parquet, in order, and the Centroids field each fills.
CENTROID_KINDS: tuple[str, ...] = ("region", "age_band", "category", "attribute", "projection")


def centroids_frame(c: Centroids) -> pl.DataFrame:
    """``centroids.parquet``: one row per centroid, direction or projection weight vector."""
    parts = []
    for kind in CENTROID_KINDS:
        rows = getattr(c, kind).T if kind == "projection" else getattr(c, kind)  # projection: [dim, k]
        parts.append(
            pl.DataFrame(
                {
                    "kind": pl.repeat(kind, rows.shape[0], eager=True, dtype=pl.String),
                    "index": np.arange(rows.shape[0], dtype=np.int64),
                    "vector": pl.Series(rows.astype(np.float64)).cast(pl.List(pl.Float64)),
                    "log_price": c.log_price if kind == "category" else np.full(rows.shape[0], None),
                },
                schema_overrides={"log_price": pl.Float64},
            )
        )
    return pl.concat(parts)


def read_centroids(frame: pl.DataFrame, dim: int, sizes: dict[str, int]) -> Centroids:
    """Centroids from ``centroids.parquet``; ``sizes``: the rows expected per kind (from the config).

    A count or dimension that does not match is a one-line ``DataError``."""
    out: dict[str, np.ndarray] = {}
    for kind in CENTROID_KINDS:
        rows = frame.filter(pl.col("kind") == kind).sort("index")
        if rows.height != sizes[kind] or (rows.height and rows["vector"].list.len().min() != dim):
            raise DataError(
                f"truth/centroids.parquet: {rows.height} '{kind}' rows of dimension "
                f"{rows['vector'].list.len().min() if rows.height else dim}, the config says {sizes[kind]} of {dim}"
            )
        m = rows["vector"].list.to_array(dim).to_numpy().reshape(rows.height, dim)
        out[kind] = m.T.copy() if kind == "projection" else m
        if kind == "category":
            out["log_price"] = rows["log_price"].to_numpy()
    return Centroids(**out)


def all_pairs(w: World) -> bool:
    """Whether ``interest.parquet`` holds every user x item pair (else only the pairs in the logs)."""
    return w.user_ids.len() * w.item_ids.len() <= ALL_PAIRS_LIMIT


def observed_pairs(w: World, impressions: pl.DataFrame) -> np.ndarray:
    """The distinct (user, item) pairs of ``impressions``, as user row * n_items + item row; [P] int64, sorted.

    The logs can be read in parts: ``distinct(np.concatenate(parts))`` is the union."""
    n_items = w.item_ids.len()
    codes = (
        impressions.select("user_id", "item_id")
        .join(pl.DataFrame({"user_id": w.user_ids, "u": np.arange(w.user_ids.len())}), on="user_id")
        .join(pl.DataFrame({"item_id": w.item_ids, "i": np.arange(n_items)}), on="item_id")
        .select(pl.col("u") * n_items + pl.col("i"))
    )
    return distinct(codes.to_series().to_numpy())


def distinct(codes: np.ndarray) -> np.ndarray:
    """Sorted distinct values of ``codes`` ([N] int64); polars' multithreaded unique, several times
    faster than ``np.unique`` on millions of codes."""
    return pl.Series(codes).unique().sort().to_numpy()


#: Pairs per ``interest.parquet`` frame of a world with only observed pairs (bounds its memory).
PAIRS_PER_FRAME = 1 << 22


def _interest_pairs(w: World, pairs: np.ndarray | None) -> pl.DataFrame | Iterator[pl.DataFrame]:
    """``interest.parquet``: every pair (``pairs`` None; one frame) or the ``pairs`` given (by user
    row, then item row; in frames of ``PAIRS_PER_FRAME``)."""
    n_users, n_items = w.user_ids.len(), w.item_ids.len()
    if pairs is None:
        u = np.repeat(np.arange(n_users), n_items)
        i = np.tile(np.arange(n_items), n_users)
        scores = Truth.matrix(w.user_vectors, w.item_vectors)
        if w.price_taste is not None and w.price_position is not None:
            scores = scores + np.outer(w.price_taste, w.price_position)
        return _interest_frame(w, u, i, scores.ravel())
    return (_observed_frame(w, pairs[s : s + PAIRS_PER_FRAME]) for s in range(0, pairs.size, PAIRS_PER_FRAME))


def _observed_frame(w: World, pairs: np.ndarray) -> pl.DataFrame:
    u, i = np.divmod(pairs, w.item_ids.len())
    return _interest_frame(w, u, i, w.interest(u, i))


def _interest_frame(w: World, u: np.ndarray, i: np.ndarray, scores: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "user_id": w.user_ids.gather(u),
            "item_id": w.item_ids.gather(i),
            "interest": scores.astype(np.float32),
        }
    )


class FrameWriter:
    """Frames of one schema appended to one zstd parquet file, so the file can outgrow memory."""

    def __init__(self, path: Path) -> None:
        self.path, self.rows = path, 0
        self._writer: pq.ParquetWriter | None = None

    def write(self, df: pl.DataFrame) -> None:
        table = df.to_arrow(compat_level=pl.CompatLevel.oldest())  # large_string, as polars writes it
        if self._writer is None:
            # Dictionaries for the strings only: on floats they cost time and made the file larger.
            strings = [c for c, t in df.schema.items() if t == pl.String]
            self._writer = pq.ParquetWriter(
                self.path, table.schema, compression="zstd", use_dictionary=strings
            )
        self._writer.write_table(table)
        self.rows += df.height

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def write_frames(path: Path, frames: Iterable[pl.DataFrame]) -> int:
    """Write ``frames`` (one schema) to one parquet file, one frame at a time; returns the rows."""
    writer = FrameWriter(path)
    try:
        for df in frames:
            writer.write(df)
    finally:
        writer.close()
    return writer.rows


def _readme(meta: dict[str, Any]) -> str:
    lines = [
        "# Ground truth of a PARPO synthetic dataset",
        "",
        "Generated by `data_pipelines.synth` (generator version "
        f"{meta['generator_version']}, config digest {meta['config_digest']}). "
        "See docs/synthetic.md for the model and meta.json for the full config.",
        "",
        "## Model",
        "",
        *[f"- {k}: `{v}`" for k, v in meta["model"].items()],
        "",
        "## Files",
        "",
    ]
    for name, cols in meta["columns"].items():
        lines.append(f"- `{name}` ({meta['files'][name]['rows']} rows)")
        lines.extend(f"  - `{c}`: {d}" for c, d in cols.items())
    lines += ["", "Any pair: `data_pipelines.synth.true_interest(DIR, users, items)`.", ""]
    return "\n".join(lines)


class Truth:
    """Read access to ``truth/``: true interest of any (user, item) pair, conformity, vectors."""

    def __init__(self, root: str | Path) -> None:
        self.dir = truth_dir(root)
        self.meta = json.loads((self.dir / "meta.json").read_text())
        users = pl.read_parquet(self.dir / "user_vectors.parquet")
        items = pl.read_parquet(self.dir / "items.parquet", columns=["item_id", "vector"])
        self.user_ids, self.user_vectors = users["user_id"], _matrix(users["vector"])
        self.item_ids, self.item_vectors = items["item_id"], _matrix(items["vector"])
        self._conformity = pl.read_parquet(self.dir / "conformity.parquet")
        # Worlds with a price preference: s(u, i) adds taste_u * x_i (docs/synthetic.md).
        self.price_taste: np.ndarray | None = None  # [n_users] float64, price_preference * rho_u
        self.price_position: np.ndarray | None = None  # [n_items] float64, x_i
        if (self.dir / "price_preference.parquet").is_file():
            cfg = SynthConfig.model_validate(self.meta["config"])
            rho = pl.read_parquet(self.dir / "price_preference.parquet")
            if not rho["user_id"].equals(self.user_ids):
                raise DataError(
                    f"{self.dir}: price_preference.parquet and user_vectors.parquet list different users"
                )
            price = pl.read_parquet(self.dir / "items.parquet", columns=["price"])["price"].to_numpy()
            self.price_taste = cfg.price_preference * rho["rho"].to_numpy().astype(np.float64)
            self.price_position = price_position(cfg, price)

    def user_index(self, users: Sequence[str] | pl.Series | np.ndarray) -> np.ndarray:
        return _lookup(self.user_ids, users, "user")

    def item_index(self, items: Sequence[str] | pl.Series | np.ndarray) -> np.ndarray:
        return _lookup(self.item_ids, items, "item")

    def interest(self, users, items) -> np.ndarray:
        """True interest of the pairs (users[k], items[k]); [N] float64."""
        u, i = self.user_index(users), self.item_index(items)
        if u.size != i.size:
            raise ValueError(f"users ({u.size}) and items ({i.size}) must have the same length")
        return self.interest_at(u, i)

    def interest_at(self, u: np.ndarray, i: np.ndarray) -> np.ndarray:
        """True interest of the pairs of truth rows (u[k], i[k]) ([N] int indices); [N] float64."""
        s = row_interest(self.user_vectors[u], self.item_vectors[i])
        if self.price_taste is None or self.price_position is None:
            return s
        return s + self.price_taste[u] * self.price_position[i]

    def interest_matrix(self, users=None, items=None) -> np.ndarray:
        """True interest of every user x item (all users / items when None); [U', I'] float64."""
        u = slice(None) if users is None else self.user_index(users)
        i = slice(None) if items is None else self.item_index(items)
        m = self.matrix(self.user_vectors[u], self.item_vectors[i])
        if self.price_taste is None or self.price_position is None:
            return m
        return m + np.outer(self.price_taste[u], self.price_position[i])

    @staticmethod
    def matrix(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """u v^T / sqrt(dim) for [U, dim] and [I, dim] vectors (the vector part only); [U, I] float64."""
        return u.astype(np.float64) @ v.T.astype(np.float64) / np.sqrt(u.shape[1])

    def conformity(self, users) -> np.ndarray:
        """c_u for each user; [N] float64."""
        return self._conformity["conformity"].to_numpy()[self.user_index(users)]


def true_interest(root: str | Path, users, items) -> np.ndarray:
    """True interest score s(u, i) = u . v_i / sqrt(dim) for pairs of ids, from ``root``'s truth/
    (plus ``price_preference * rho_u * x_i`` in a world with a price preference).

    ``root``: a synthetic dataset folder (or its ``truth/``); ``users``, ``items``: equal-length
    id sequences. Returns [N] float64. Loads the vectors on each call; use ``Truth`` to reuse them.
    """
    return Truth(root).interest(users, items)


def _matrix(col: pl.Series) -> np.ndarray:
    dim = int(col.list.len().max() or 0)
    return col.list.to_array(dim).to_numpy().astype(np.float32, copy=False)


def _lookup(known: pl.Series, ids, kind: str) -> np.ndarray:
    want = pl.Series("id", list(ids) if not isinstance(ids, pl.Series | np.ndarray) else ids, dtype=pl.String)
    index = pl.DataFrame({"id": known, "k": np.arange(known.len(), dtype=np.int64)})
    found = pl.DataFrame({"id": want}).join(index, on="id", how="left", maintain_order="left")
    missing = found.filter(pl.col("k").is_null())
    if missing.height:
        raise DataError(f"unknown {kind} id {missing['id'][0]!r} ({missing.height} unknown in all)")
    return found["k"].to_numpy()
