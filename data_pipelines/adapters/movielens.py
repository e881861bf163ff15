"""MovieLens 100K: ``u.data`` ratings, ``u.item`` genres, ``u.user`` demographics.

Ratings become ``rate`` rows with the rating in ``value`` and the Unix time in
``ts``. Genres -> item ``attributes``, the first genre -> ``category``;
``u.user`` -> user features (age, gender, occupation, zip). ``--input`` is the
folder (or its ``u.data``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from data_pipelines.adapters.base import FileSpec, Source, rating_rows
from data_pipelines.lines import Dialect, read_chunks
from data_pipelines.schema import features_expr
from data_pipelines.validate import parse_ts, resolve_ts_format
from parpo_core.errors import DataError

DIALECT = Dialect(("user", "item", "rating", "ts"), separator="\t", quote=None)


def rows(fields: pl.DataFrame) -> pl.DataFrame:
    return rating_rows(fields, ts=parse_ts("ts", resolve_ts_format(fields["ts"], "unix")))


def _side(path: Path, dialect: Dialect, what: str) -> pl.DataFrame:
    """Read a small side file strictly: any bad line is an error (no quarantine for catalogues)."""
    parts = list(read_chunks(path, dialect))
    bad = [c.rejects for c in parts if c.rejects.height]
    if bad:
        first = bad[0].row(0, named=True)
        raise DataError(f"{path} line {first['line']}: {first['reason']} ({what})")
    return pl.concat([c.fields for c in parts])


def items_table(folder: Path) -> pl.DataFrame:
    genres = [
        ln.split("|")[0]
        for ln in (folder / "u.genre").read_text(encoding="latin-1").splitlines()
        if ln.strip()
    ]
    cols = ("item", "title", "release", "video_release", "url", *genres)
    df = _side(folder / "u.item", Dialect(cols, separator="|", quote=None, encoding="latin-1"), "u.item")
    flags = pl.concat_list([pl.when(pl.col(g) == "1").then(pl.lit(g)) for g in genres]).list.drop_nulls()
    return df.select(
        pl.col("item").alias("item_id"),
        flags.list.first().alias("category"),
        flags.alias("attributes"),
        pl.lit(None, dtype=pl.Float64).alias("price"),
    )


def users_table(folder: Path) -> pl.DataFrame:
    cols = ("user", "age", "gender", "occupation", "zip")
    df = _side(folder / "u.user", Dialect(cols, separator="|", quote=None, encoding="latin-1"), "u.user")
    return df.select(pl.col("user").alias("user_id"), features_expr(list(cols[1:])).alias("features"))


def source(path: Path) -> Source:
    folder = path.parent if path.is_file() else path
    data = folder / "u.data"
    missing = [n for n in ("u.data", "u.item", "u.user", "u.genre") if not (folder / n).is_file()]
    if missing:
        raise DataError(f"{folder}: not a MovieLens-100K folder (missing {', '.join(missing)})")
    return Source(
        "movielens", [FileSpec(data, rows, DIALECT)], items=items_table(folder), users=users_table(folder)
    )
