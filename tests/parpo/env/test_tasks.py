"""Tasks come from the right parts of the reward version's split, with seeded price caps."""

from __future__ import annotations

import math

import polars as pl
import pytest

from parpo.env.config import PriceCapConfig, TaskConfig
from parpo.env.tasks import make_tasks

pytestmark = pytest.mark.integration


def pairs(df: pl.DataFrame) -> set[tuple[str, str]]:
    return set(df.select("user_id", "item_id").iter_rows())


def test_split_is_the_reward_versions(source):
    assert source.split.meta["name"] == "intervened" and source.split.meta["seed"] == 0


def test_tasks_come_from_their_part_and_cold_users_only_in_cold_tasks(source):
    s = source.split
    cold_users = set(s.cold_profile["user_id"].to_list())
    train, warm, cold = (source.tasks(w) for w in ("train", "warm", "cold"))
    assert train and warm and cold
    assert {(t.user_id, t.target) for t in train} <= pairs(s.train)
    assert {(t.user_id, t.target) for t in warm} <= pairs(s.test)
    assert {(t.user_id, t.target) for t in cold} <= pairs(s.cold_test)
    assert not {t.user_id for t in train + warm} & cold_users
    assert {t.user_id for t in cold} <= cold_users and all(t.cold and t.profile for t in cold)
    assert not any(t.cold or t.profile for t in train + warm)
    # the reward model saw no warm evaluation pair
    assert not {(t.user_id, t.target) for t in warm} & pairs(s.train)
    per_user = pl.Series([t.user_id for t in train]).value_counts()["count"]
    assert per_user.max() <= source.cfg.tasks.per_user_train


def test_requests_by_hand(source):
    c = source.catalogue
    for t in source.tasks("warm"):
        row = c.row[t.target]
        assert t.request.category == c.categories[c.cat[row]]
        cap, price = t.request.constraints.price_max, c.price[row]
        assert price <= cap <= math.ceil(price * 1.5 * 100) / 100  # the target is always feasible
        assert bool(c.mask(t.request.category, t.request.constraints)[row])


def test_seeded_and_bounded(source):
    cfg = TaskConfig(price_cap=PriceCapConfig(p=0.0))
    a = make_tasks(source.split, source.catalogue, "warm", cfg, per_user=1, max_tasks=7)
    b = make_tasks(source.split, source.catalogue, "warm", cfg, per_user=1, max_tasks=7)
    assert a == b and len(a) == 7 and all(t.request.constraints.price_max is None for t in a)
    other = make_tasks(source.split, source.catalogue, "warm", TaskConfig(seed=1), per_user=1, max_tasks=7)
    assert [t.user_id for t in other] != [t.user_id for t in a]


def test_items_without_a_category_give_attribute_requests():
    """Amazon-like items: no category, attribute ids; no prices, so no cap."""
    from data_pipelines.schema import INTERACTIONS, polars_schema
    from data_pipelines.splits import Split
    from parpo.env import Catalogue

    cat = Catalogue(
        pl.DataFrame(
            {
                "item_id": ["x", "y"],
                "category": [None, None],
                "attributes": [["brand1", "cat9"], []],
                "price": [None, None],
                "popularity": [1, 1],
                "recency": [0.0, 0.0],
            },
            schema_overrides={"category": pl.String, "price": pl.Float64},
        )
    )
    schema = polars_schema(INTERACTIONS)
    test = pl.DataFrame({"user_id": ["u", "u"], "item_id": ["x", "y"]}).with_columns(
        pl.lit(None).cast(t).alias(c) for c, t in schema.items() if c not in ("user_id", "item_id")
    )
    split = Split(test=test.select(list(schema)))
    tasks = make_tasks(split, cat, "warm", TaskConfig(), per_user=5)
    assert len(tasks) == 1  # y has neither a category nor attributes
    t = tasks[0]
    assert (t.target, t.request.category, t.request.constraints.attributes) == ("x", None, ["brand1"])
    assert t.request.constraints.price_max is None
