"""The canonical dataset schema, defined once.

Every stage reads these tables; adapters produce them. ``SCHEMA_VERSION`` is
stored in each parquet file's metadata and in the dataset manifest.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

SCHEMA_VERSION = 1

#: Event types, in funnel order. An impression is an exposure, never a positive.
EVENTS: tuple[str, ...] = ("impression", "view", "click", "cart", "fav", "buy", "rate")

#: Events that count as positives by default (the RecBole-Debias protocol):
#: every non-impression event, ``rate`` of any value included.
DEFAULT_POSITIVE_EVENTS: tuple[str, ...] = tuple(e for e in EVENTS if e != "impression")

_MAP = pa.map_(pa.string(), pa.string())

INTERACTIONS = pa.schema(
    [
        pa.field("user_id", pa.string()),  # null only for anonymous rows that carry a request_id
        pa.field("item_id", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("seq", pa.int64(), nullable=False),  # order within user (or request if anonymous)
        pa.field("event", pa.string(), nullable=False),
        pa.field("value", pa.float64()),  # rating or reward
        pa.field("category", pa.string()),
        pa.field("session_id", pa.string()),
        pa.field("request_id", pa.string()),
        pa.field("position", pa.int32()),  # 1-based slot in the shown slate
        pa.field("propensity", pa.float64()),  # P(logging policy showed this item at this position)
        pa.field("logging_policy", pa.string()),
    ]
)

ITEMS = pa.schema(
    [
        pa.field("item_id", pa.string(), nullable=False),
        pa.field("category", pa.string()),
        pa.field("attributes", pa.list_(pa.string())),
        pa.field("price", pa.float64()),
    ]
)

USERS = pa.schema([pa.field("user_id", pa.string(), nullable=False), pa.field("features", _MAP)])

CONTEXTS = pa.schema([pa.field("request_id", pa.string(), nullable=False), pa.field("features", _MAP)])

#: Coat: P(rating observed) for the self-selected (MNAR) part, kept apart from
#: ``propensity`` (which is about what a logging policy showed).
OBSERVATION_PROPENSITIES = pa.schema(
    [
        pa.field("user_id", pa.string(), nullable=False),
        pa.field("item_id", pa.string(), nullable=False),
        pa.field("propensity", pa.float64(), nullable=False),
    ]
)

IDMAP = pa.schema(
    [pa.field("id", pa.string(), nullable=False), pa.field("index", pa.int64(), nullable=False)]
)

REJECTS = pa.schema(
    [
        pa.field("ingest_id", pa.string(), nullable=False),
        pa.field("file", pa.string(), nullable=False),
        pa.field("line", pa.int64(), nullable=False),  # 1-based physical line number in `file`
        pa.field("raw", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        # The line's exact bytes where ``raw`` cannot hold them (not valid UTF-8: ``raw`` shows
        # U+FFFD), so a fixed file can be rebuilt. Rejects written by release 0.1.0 lack it.
        pa.field("raw_base64", pa.string()),
    ]
)


def polars_schema(schema: pa.Schema) -> dict[str, pl.DataType]:
    """The polars dtypes of an Arrow schema (maps become list<struct<key, value>>)."""
    return dict(pl.from_arrow(schema.empty_table()).schema)


def with_version(schema: pa.Schema) -> pa.Schema:
    return schema.with_metadata({b"schema_version": str(SCHEMA_VERSION).encode()})


def to_arrow(df: pl.DataFrame, schema: pa.Schema) -> pa.Table:
    """Conform a polars frame to a canonical Arrow schema (column order, types, maps).

    Raises ``ValueError`` naming the column when a column is missing or cannot be cast.
    """
    missing = [f.name for f in schema if f.name not in df.columns]
    if missing:
        raise ValueError(f"missing canonical columns: {', '.join(missing)}")
    arrays = []
    for field in schema:
        col = df.get_column(field.name).to_arrow()
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if pa.types.is_map(field.type):
            col = _list_of_structs_to_map(col, field.type)
        else:
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise ValueError(f"column {field.name!r} cannot be cast to {field.type}: {e}") from None
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=with_version(schema))


def _list_of_structs_to_map(col: pa.Array, map_type: pa.MapType) -> pa.Array:
    if pa.types.is_map(col.type):
        return col.cast(map_type)
    col = col.cast(pa.large_list(pa.struct([("key", pa.string()), ("value", pa.string())])))
    flat = col.flatten()
    offsets = col.offsets.cast(pa.int32())
    return pa.MapArray.from_arrays(
        offsets, flat.field("key"), flat.field("value"), type=map_type, mask=col.is_null()
    )


def features_expr(columns: list[str], names: list[str] | None = None) -> pl.Expr:
    """A list<struct<key, value>> expression (written as an Arrow map) from string columns.

    Null values are left out of the map.
    """
    names = names or columns
    entries = [
        pl.when(pl.col(c).is_not_null()).then(pl.struct(key=pl.lit(n), value=pl.col(c).cast(pl.String)))
        for c, n in zip(columns, names, strict=True)
    ]
    return pl.concat_list(entries).list.drop_nulls()


#: The key that orders ``seq``: the user, or the request for anonymous rows. The prefixed request
#: id is built only where the user is null (``concat_str`` of a null is null): building it for
#: every row that has a request took half the key's cost.
SEQ_KEY = pl.coalesce(
    pl.col("user_id"),
    pl.concat_str([pl.lit("\x00request:"), pl.when(pl.col("user_id").is_null()).then(pl.col("request_id"))]),
).alias("__key")
