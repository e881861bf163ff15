"""Open Bandit Dataset (ZOZOTOWN): logged slates with true propensities.

Each CSV row is one impression of one item at one position. It becomes an
``impression`` row (anonymous: no user; ``request_id`` =
``obd:<campaign>:<policy>:<row>``; ``item_id`` = ``<campaign>:<item>``;
``value`` = the click, 0 or 1, as the logged reward; ``position``;
``propensity``; ``logging_policy`` ``uniform_random`` or ``obd_bts``) plus a
``click`` row (``value`` 1) where click = 1. User features and user-item
affinities go to the contexts table; ``item_context.csv`` to the item table.
``--input`` is the dataset folder, one policy folder or one campaign folder.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from data_pipelines.adapters.base import FileSpec, Source, finish, nonempty
from data_pipelines.lines import LINE, Dialect, read_chunks, read_header
from data_pipelines.schema import features_expr
from data_pipelines.validate import ORD, number, parse_ts
from parpo_core.errors import DataError

POLICIES = {"random": "uniform_random", "bts": "obd_bts"}


def _rows(campaign: str, policy: str, feature_cols: list[str]):
    def rows(fields: pl.DataFrame) -> pl.DataFrame:
        ts, ts_why = parse_ts("timestamp", "iso8601")
        pos, pos_why = number("position", pl.Int32)
        click, click_why = number("click", pl.Int64)
        prop, prop_why = number("propensity_score")
        base = fields.select(
            LINE,
            pl.format(f"obd:{campaign}:{policy}:{{}}", nonempty(pl.col("__index"))).alias("request_id"),
            pl.format(f"{campaign}:{{}}", nonempty(pl.col("item_id"))).alias("item_id"),
            ts.alias("ts"),
            pos.alias("position"),
            click.alias("__click"),
            prop.alias("propensity"),
            pl.lit(policy).alias("logging_policy"),
            pl.coalesce(
                ts_why,
                pos_why,
                click_why,
                prop_why,
                pl.when(~click.is_in([0, 1])).then(pl.format("click '{}' is not 0 or 1", pl.col("click"))),
                pl.when(nonempty(pl.col("__index")).is_null()).then(pl.lit("row index is empty")),
            ).alias("__why"),
            features_expr(feature_cols).alias("__context"),
        )
        impressions = base.with_columns(
            pl.lit("impression").alias("event"),
            pl.col("__click").cast(pl.Float64).alias("value"),
            pl.lit(0, dtype=pl.Int32).alias(ORD),
        )
        clicks = base.filter(pl.col("__click") == 1).with_columns(
            pl.lit("click").alias("event"),
            pl.lit(1.0).alias("value"),
            pl.lit(1, dtype=pl.Int32).alias(ORD),
            pl.lit(None).alias("__context"),
        )
        df = pl.concat([impressions, clicks], how="diagonal_relaxed").sort(LINE, ORD)
        return finish(df.drop("__click"), pl.col("__why"))

    return rows


def _items(path: Path, campaign: str) -> pl.DataFrame:
    df = pl.concat(
        [c.fields for c in read_chunks(path, Dialect(tuple(read_header(path, _probe())), header=True))]
    )
    feats = [c for c in df.columns if c.startswith("item_feature_")]
    return df.select(
        pl.format(f"{campaign}:{{}}", pl.col("item_id")).alias("item_id"),
        pl.lit(campaign).alias("category"),
        pl.concat_list([pl.format(f"{c.removeprefix('item_')}={{}}", pl.col(c)) for c in feats]).alias(
            "attributes"
        ),
    )


def _probe() -> Dialect:
    return Dialect(columns=None, header=True)


def source(path: Path) -> Source:
    csvs = sorted(p for p in path.rglob("*.csv") if p.stem == p.parent.name) if path.is_dir() else [path]
    if not csvs:
        raise DataError(f"{path}: no OBD logs (expected <policy>/<campaign>/<campaign>.csv)")
    specs, items = [], []
    for csv in csvs:
        campaign, policy_dir = csv.parent.name, csv.parent.parent.name
        if policy_dir not in POLICIES:
            raise DataError(f"{csv}: cannot tell the logging policy (its folder should be random/ or bts/)")
        header = read_header(csv, _probe())
        cols = ["__index" if i == 0 and not h else h for i, h in enumerate(header)]
        needed = {"timestamp", "item_id", "position", "click", "propensity_score"}
        if not needed <= set(cols):
            raise DataError(f"{csv}: not an OBD log (header lacks {', '.join(sorted(needed - set(cols)))})")
        feature_cols = [c for c in cols if c.startswith(("user_feature_", "user-item_affinity_"))]
        dialect = Dialect(tuple(cols), header=True)
        policy = POLICIES[policy_dir]
        specs.append(
            FileSpec(csv, _rows(campaign, policy, feature_cols), dialect, scope=f"{policy}:{campaign}")
        )
        ctx = csv.parent / "item_context.csv"
        if ctx.is_file():
            items.append((policy_dir != "random", _items(ctx, campaign)))
    # Hashed item features differ between the random and bts folders (zr-obp #162/#163): prefer random's.
    table = None
    if items:
        ordered = [df for _, df in sorted(items, key=lambda x: x[0])]
        table = pl.concat(ordered).unique("item_id", keep="first", maintain_order=True)
    return Source("obd", specs, items=table)
