"""Amazon reviews in the S3-Rec format: ``<Name>.txt`` + ``<Name>_item2attributes.json``.

``<Name>.txt`` holds one user per line, ``user item_1 ... item_n`` in
chronological order without timestamps. Every review becomes a ``buy`` row
(``ts`` null, ``seq`` keeps the order); attribute ids (brand and category-path
tokens) go to the item table's ``attributes``. ``--input`` is the ``.txt`` file
or a folder holding one pair.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from data_pipelines.adapters.base import FileSpec, Source, finish
from data_pipelines.lines import LINE, TEXT, Dialect, read_text
from data_pipelines.validate import ORD
from parpo_core.errors import DataError

DIALECT = Dialect(columns=None, separator=" ", quote=None)


def rows(fields: pl.DataFrame) -> pl.DataFrame:
    tokens = fields.select(LINE, pl.col(TEXT).str.strip_chars().str.split(" ").alias("__tok"))
    short = pl.col("__tok").list.len() < 2
    df = (
        tokens.with_columns(
            pl.col("__tok").list.first().alias("user_id"),
            pl.when(short).then(pl.lit([""])).otherwise(pl.col("__tok").list.slice(1)).alias("item_id"),
            pl.when(short)
            .then(pl.lit("a sequence line needs a user id and at least one item"))
            .alias("__why"),
        )
        .explode("item_id")
        .with_columns(
            pl.int_range(pl.len(), dtype=pl.Int32).over(LINE).alias(ORD),
            pl.when(pl.col("item_id") == "").then(None).otherwise(pl.col("item_id")).alias("item_id"),
            pl.lit("buy").alias("event"),
        )
    )
    empty_token = pl.when(pl.col("item_id").is_null() & pl.col("__why").is_null()).then(
        pl.lit("empty item id (two spaces in a row?)")
    )
    return finish(df.drop("__tok"), pl.col("__why"), empty_token)


def _pair(path: Path) -> tuple[Path, Path]:
    if path.is_dir():
        txts = [
            p for p in sorted(path.glob("*.txt")) if (p.parent / f"{p.stem}_item2attributes.json").exists()
        ]
        if len(txts) != 1:
            raise DataError(
                f"{path}: expected one <Name>.txt with <Name>_item2attributes.json, found {len(txts)}"
            )
        path = txts[0]
    attrs = path.parent / f"{path.stem}_item2attributes.json"
    if not path.is_file() or not attrs.is_file():
        raise DataError(f"{path}: S3-Rec input needs {path.name} and {attrs.name} side by side")
    return path, attrs


def items_table(attrs: Path) -> pl.DataFrame:
    try:
        data = json.loads(read_text(attrs))
    except (OSError, ValueError) as e:  # ValueError: not JSON, or not UTF-8
        raise DataError(f"{attrs}: not a JSON object of item -> attribute ids ({e})") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise DataError(f"{attrs}: expected a JSON object mapping item ids to lists of attribute ids")
    return pl.DataFrame(
        {"item_id": list(data.keys()), "attributes": [[str(a) for a in v] for v in data.values()]},
        schema={"item_id": pl.String, "attributes": pl.List(pl.String)},
    )


def source(path: Path) -> Source:
    txt, attrs = _pair(path)
    return Source("amazon-s3rec", [FileSpec(txt, rows, DIALECT)], items=items_table(attrs))
