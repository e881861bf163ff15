"""Coat shopping (Schnabel et al., ICML 2016).

``user.txt`` (self-selected ratings, MNAR) and ``random.txt`` (ratings of
uniformly assigned coats, MAR) become ``rate`` rows with ``logging_policy``
``self_selected`` / ``uniform_random``; no timestamps (``seq`` keeps the order).
The learned P(rating observed) of ``propensities.ascii`` goes to the
``observation_propensities`` table, not to ``propensity`` (which is about what
a logging policy showed). One-hot user and item features become user features
and item ``category`` (jacket type) / ``attributes``. ``--input`` is the folder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from data_pipelines.adapters.base import FileSpec, Source, rating_rows
from data_pipelines.lines import Dialect, read_text
from parpo_core.errors import DataError

DIALECT = Dialect(("user", "item", "rating"), quote=None)


def _rows(policy: str):
    return lambda fields: rating_rows(fields, logging_policy=(pl.lit(policy), None))


def _matrix(path: Path, shape: tuple[int, int] | None = None) -> np.ndarray:
    try:
        m = np.loadtxt(path, ndmin=2)
    except (OSError, ValueError) as e:
        raise DataError(
            f"{path}: not a whitespace-separated numeric matrix ({str(e).splitlines()[0]})"
        ) from None
    if shape and m.shape != shape:
        raise DataError(
            f"{path}: expected a {shape[0]} x {shape[1]} matrix, found {m.shape[0]} x {m.shape[1]}"
        )
    return m


def _one_hot_names(matrix: np.ndarray, names: list[str], path: Path) -> list[list[str]]:
    if matrix.shape[1] != len(names):
        raise DataError(f"{path}: {matrix.shape[1]} columns but {len(names)} names in its map file")
    cols = np.array(names, dtype=object)
    return [list(cols[row > 0]) for row in matrix]


def source(path: Path) -> Source:
    folder = path if path.is_dir() else path.parent
    needed = ["user.txt", "random.txt", "propensities.ascii", "user_item_features"]
    missing = [n for n in needed if not (folder / n).exists()]
    if missing:
        raise DataError(f"{folder}: not a Coat folder (missing {', '.join(missing)})")
    feats = folder / "user_item_features"
    unames = read_text(feats / "user_features_map.txt").split("\n")
    unames = [n for n in unames if n]
    inames = [n for n in read_text(feats / "item_features_map.txt").split("\n") if n]
    umat = _matrix(feats / "user_features.ascii")
    imat = _matrix(feats / "item_features.ascii")
    user_tags = _one_hot_names(umat, unames, feats / "user_features.ascii")
    item_tags = _one_hot_names(imat, inames, feats / "item_features.ascii")
    users = pl.DataFrame(
        {
            "user_id": [str(u) for u in range(len(user_tags))],
            "features": [
                [{"key": t.split(":", 1)[0], "value": t.split(":", 1)[1]} for t in tags] for tags in user_tags
            ],
        }
    )
    items = pl.DataFrame(
        {
            "item_id": [str(i) for i in range(len(item_tags))],
            "category": [
                next((t.split(":", 1)[1] for t in tags if t.startswith("jackettype:")), None)
                for tags in item_tags
            ],
            "attributes": item_tags,
        },
        schema={"item_id": pl.String, "category": pl.String, "attributes": pl.List(pl.String)},
    )
    props = _matrix(folder / "propensities.ascii", (len(user_tags), len(item_tags)))
    u, i = np.nonzero(props > 0)
    observation = pl.DataFrame(
        {"user_id": u.astype(str), "item_id": i.astype(str), "propensity": props[u, i].astype(np.float64)}
    )
    return Source(
        "coat",
        [
            FileSpec(folder / "user.txt", _rows("self_selected"), DIALECT, scope="self_selected"),
            FileSpec(folder / "random.txt", _rows("uniform_random"), DIALECT, scope="uniform_random"),
        ],
        items=items,
        users=users,
        observation_propensities=observation,
    )
