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


def test_items_without_a_category_give_attribute_or_open_requests():
    """Amazon-like items (no category, attribute ids) and a shop's bare items: a target with
    neither makes an open request, price-cap only where it has a price, else empty."""
    from data_pipelines.schema import INTERACTIONS, polars_schema
    from data_pipelines.splits import Split
    from parpo.env import Catalogue

    cat = Catalogue(
        pl.DataFrame(
            {
                "item_id": ["x", "y", "z"],
                "category": [None, None, None],
                "attributes": [["brand1", "cat9"], [], []],
                "price": [None, None, 10.0],
                "popularity": [1, 1, 1],
                "recency": [0.0, 0.0, 0.0],
            },
            schema_overrides={"category": pl.String, "price": pl.Float64},
        )
    )
    schema = polars_schema(INTERACTIONS)
    test = pl.DataFrame({"user_id": ["u", "u", "u"], "item_id": ["x", "y", "z"]}).with_columns(
        pl.lit(None).cast(t).alias(c) for c, t in schema.items() if c not in ("user_id", "item_id")
    )
    split = Split(test=test.select(list(schema)))
    tasks = {t.target: t for t in make_tasks(split, cat, "warm", TaskConfig(), per_user=5)}
    assert set(tasks) == {"x", "y", "z"}
    x, y, z = (tasks[i].request for i in "xyz")
    assert (x.category, x.constraints.attributes, x.constraints.price_max) == (None, ["brand1"], None)
    assert y.category is None and y.constraints.empty
    assert z.category is None and z.constraints.attributes == [] and 10.0 <= z.constraints.price_max <= 15.0


def test_open_share_drops_the_scope_and_keeps_every_other_draw(source):
    base = make_tasks(source.split, source.catalogue, "train", TaskConfig(), per_user=4)
    assert all(t.request.category is not None for t in base)  # synthetic items all have a category
    for share in (0.0, 0.3, 1.0):
        opened = make_tasks(source.split, source.catalogue, "train", TaskConfig(open_share=share), per_user=4)
        assert [(t.user_id, t.target, t.request.constraints) for t in opened] == [
            (t.user_id, t.target, t.request.constraints) for t in base
        ]
        frac = sum(t.request.category is None for t in opened) / len(opened)
        assert (share == 0.0 and frac == 0.0) or (share == 1.0 and frac == 1.0) or 0.2 < frac < 0.4, frac
