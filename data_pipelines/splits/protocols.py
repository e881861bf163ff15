"""The split protocols (see docs/splits.md for the table of parts and rules).

Each takes a ``Prepared`` and returns its parts. ``temporal``, ``intervened``
and ``cold_users`` assign ``Prepared.warm_units`` (positive rows, or (user,
item) pairs under split algorithm 2) and return the rows those units stand
for. Randomness comes from ``Prepared.row_uniform`` (a stable hash of user,
seq, seed and purpose; a pair uses its first positive's seq), so a seed fixes
the realisation and appends do not reshuffle old users.
"""

from __future__ import annotations

import polars as pl

from data_pipelines.splits.hashing import id_hash64, uniform
from data_pipelines.splits.prepare import COAT_RANDOM, Prepared
from data_pipelines.splits.registry import register
from data_pipelines.splits.sampling import draw_mask, order_in_group
from parpo_core.errors import DataError

VALID_FRACTION = 0.10  # cold_users: valid users; cold_items: valid items; native: valid rows
COLD_ITEM_FRACTION = 0.10
OBD_TEST_POLICY = "uniform_random"
OBD_TRAIN_POLICY = "obd_bts"


def _ceil_half(n: pl.Expr) -> pl.Expr:
    return (n + 1) // 2


@register("temporal")
def temporal(p: Prepared) -> dict[str, pl.DataFrame]:
    """Per warm user: last unit -> test, the one before -> valid, the rest -> train.

    A unit is a positive (algorithm 1) or a (user, item) pair with all its
    positives, ordered by its first one (algorithm 2). Users with fewer than 3
    units keep all of them in train. "Last" is by ts (nulls last), then seq,
    then input order.
    """
    pos = p.warm_units
    held = pl.col("__np") >= 3
    test = held & (pl.col("__prank") == pl.col("__np") - 1)
    valid = held & (pl.col("__prank") == pl.col("__np") - 2)
    return {
        "train": p.rows_of(pos.filter(~test & ~valid)),
        "valid": p.rows_of(pos.filter(valid)),
        "test": p.rows_of(pos.filter(test)),
        **p.cold_parts(),
    }


@register("intervened")
def intervened(p: Prepared) -> dict[str, pl.DataFrame]:
    """RecBole-Debias intervened split, per warm user with ``n`` units (positives, or
    (user, item) pairs with all their positives under algorithm 2).

    1. ceil(n/2) units, uniformly at random, form the normal set;
    2. from the other ``r = n - ceil(n/2)``, ``m = ceil(r/2)`` are drawn without
       replacement, weight ``max_item_count / item_count`` (counts: units on
       all data), by successive sampling (Efraimidis–Spirakis keys); the
       undrawn units are dropped;
    3. the ``m`` intervened units, in random order: ceil(m/2) test, then
       floor((m - ceil(m/2)) / 2) valid, the remainder train (so one unit -> test,
       a remainder of one -> train);
    4. train = normal + intervened-train.
    """
    counts = p.item_counts
    max_count = counts.get_column("count").max()
    units = p.warm_units
    pos = units.join(counts, on="item_id", how="left").with_columns(
        (pl.lit(max_count, dtype=pl.Float64) / pl.col("count")).alias("__w"),
        p.row_uniform(units, "intervened/normal").alias("__u1"),
        p.row_uniform(units, "intervened/draw").alias("__u2"),
        p.row_uniform(units, "intervened/order").alias("__u3"),
    )
    normal = order_in_group(pl.col("__u1"), "user_id") < _ceil_half(pl.col("__np"))
    pos = pos.with_columns(normal.alias("__normal"))
    other = pos.filter(~pl.col("__normal"))
    m = _ceil_half(pl.len().over("user_id"))
    drawn = other.filter(draw_mask(pl.col("__u2"), pl.col("__w"), m, "user_id"))
    m_user = pl.len().over("user_id")
    n_test = _ceil_half(m_user)
    n_valid = (m_user - n_test) // 2
    drawn = drawn.with_columns(order_in_group(pl.col("__u3"), "user_id").alias("__r"))
    is_test = pl.col("__r") < n_test
    is_valid = ~is_test & (pl.col("__r") < n_test + n_valid)
    train = pl.concat([pos.filter("__normal"), drawn.filter(~is_test & ~is_valid)], how="diagonal")
    return {
        "train": p.rows_of(train),
        "valid": p.rows_of(drawn.filter(is_valid)),
        "test": p.rows_of(drawn.filter(is_test)),
        **p.cold_parts(),
    }


@register("cold_users")
def cold_users(p: Prepared) -> dict[str, pl.DataFrame]:
    """Train on warm users' positives; valid = the last unit (positive, or pair with all
    its positives under algorithm 2) of a further ~10% of warm users (a hash of user
    and seed); test = the cold users' ``cold_test``."""
    pos = p.warm_units
    pos = pos.with_columns((p.user_uniform(pos, "cold_users/valid") < VALID_FRACTION).alias("__vu"))
    valid = pl.col("__vu") & (pl.col("__prank") == pl.col("__np") - 1)
    cold = p.cold_parts()
    train, held = p.rows_of(pos.filter(~valid)), p.rows_of(pos.filter(valid))
    return {"train": train, "valid": held, "test": cold["cold_test"], **cold}


@register("cold_items")
def cold_items(p: Prepared) -> dict[str, pl.DataFrame]:
    """~10% of items (a hash of item and seed) with all their warm positives -> test; a
    further ~10% of the remaining items with theirs -> valid (so model selection
    also sees item cold start); the rest -> train. Whole items move, so no pair
    crosses parts under either algorithm."""
    pos = p.warm_positives
    ih = id_hash64(pos.get_column("item_id"), p.seed).to_numpy()
    cold = uniform(ih, "cold_items") < COLD_ITEM_FRACTION
    valid = ~cold & (uniform(ih, "cold_items/valid") < VALID_FRACTION)
    pos = pos.with_columns(pl.Series("__ci", cold), pl.Series("__vi", valid))
    return {
        "train": pos.filter(~pl.col("__ci") & ~pl.col("__vi")),
        "valid": pos.filter("__vi"),
        "test": pos.filter("__ci"),
        **p.cold_parts(),
    }


@register("native")
def native(p: Prepared) -> dict[str, pl.DataFrame]:
    """The source's own held-out log; no cold users.

    - coat: test = the ``uniform_random`` positives; valid = ~10% of the
      self-selected positives (a hash of user, seq and seed); train = the rest.
    - obd: train/valid = the ``obd_bts`` (Thompson sampling) log, valid being
      ~10% of its requests; test = the ``uniform_random`` log. Every row is
      kept, impressions included: off-policy estimators need the exposures.
    """
    if p.source == "coat":
        return _native_coat(p)
    if p.source == "obd":
        return _native_obd(p)
    raise DataError(f"split 'native' needs a source with its own held-out log (coat, obd), not '{p.source}'")


def _native_coat(p: Prepared) -> dict[str, pl.DataFrame]:
    rows = p.rows.filter(pl.col("user_id").is_not_null() & pl.col("__pos"))
    random = pl.col("logging_policy").fill_null("") == COAT_RANDOM
    test = rows.filter(random)
    if test.is_empty():
        raise DataError("coat dataset has no 'uniform_random' rows: its native split has no test set")
    pool = rows.filter(~random)
    pool = pool.with_columns((p.row_uniform(pool, "native/valid") < VALID_FRACTION).alias("__v"))
    return {"train": pool.filter(~pl.col("__v")), "valid": pool.filter("__v"), "test": test}


def _native_obd(p: Prepared) -> dict[str, pl.DataFrame]:
    policy = pl.col("logging_policy").fill_null("")
    test = p.rows.filter(policy == OBD_TEST_POLICY)
    bts = p.rows.filter(policy == OBD_TRAIN_POLICY)
    if test.is_empty() or bts.is_empty():
        raise DataError(
            f"obd dataset needs both '{OBD_TEST_POLICY}' and '{OBD_TRAIN_POLICY}' logs for its native split"
        )
    # Whole requests go to valid, so a slate is never cut in two.
    key = bts.get_column("request_id").fill_null(bts.get_column("user_id")).fill_null("")
    v = uniform(id_hash64(key, p.seed).to_numpy(), "native/valid") < VALID_FRACTION
    bts = bts.with_columns(pl.Series("__v", v))
    return {"train": bts.filter(~pl.col("__v")), "valid": bts.filter("__v"), "test": test}
