"""Catalogue search on a hand-made six-item catalogue: ordering per strategy, bounds, masks."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import polars as pl
import pytest

from parpo.env import Catalogue, Constraints, Search
from tests.plugins.envs import hand_catalogue

# Rows: a0=0 a1=1 a2=2 b0=3 b1=4 b2=5; popularity 5 9 5 7 1 0; price 10 30 20 None 5 1.


@pytest.mark.parametrize(
    ("action", "k", "rows"),
    [
        (Search(strategy="popularity"), 10, [1, 3, 0, 2, 4, 5]),  # ties (a0, a2: 5) by row
        (Search(category="a"), 10, [1, 0, 2]),
        (Search(strategy="recency"), 10, [3, 0, 2, 1, 4, 5]),
        (Search(strategy="price_asc"), 10, [5, 4, 0, 2, 1, 3]),  # unknown price last
        (Search(strategy="price_desc"), 10, [1, 2, 0, 4, 5, 3]),
        (Search(strategy="attribute_match", attributes=["red", "big"]), 10, [1, 3, 0, 4, 2, 5]),
        (Search(constraints=Constraints(price_max=20)), 10, [0, 2, 4, 5]),  # b0 has no price
        (Search(constraints=Constraints(price_min=10, attributes=["red"])), 10, [1, 0]),
        (Search(), 2, [1, 3]),  # bounded
        (Search(category="zzz"), 10, []),
        (Search(constraints=Constraints(attributes=["nope"])), 10, []),
    ],
)
def test_search_order_by_hand(action, k, rows):
    assert hand_catalogue().search(action, k).tolist() == rows


def test_search_restricted_to_allowed_rows():
    allowed = np.zeros(6, dtype=bool)
    allowed[[0, 4, 5]] = True
    assert hand_catalogue().search(Search(), 10, allowed).tolist() == [0, 4, 5]


def test_features_by_hand():
    c = hand_catalogue()
    f = c.features(np.array([1, 3]), c.request_view("a", Constraints(price_max=25, attributes=["red"])))
    assert f.shape == (2, 7) and f.dtype == np.float32
    np.testing.assert_allclose(f[:, 0], [1.0, np.log1p(7) / np.log1p(9)], rtol=1e-6)  # log popularity
    np.testing.assert_allclose(f[:, 1], [2 / 5, 1.0])  # recency rank among 6: a1 third oldest, b0 newest
    np.testing.assert_allclose(f[:, 3], [1, 0])  # has_price
    np.testing.assert_allclose(f[:, 4:], [[1, 1, 0], [0, 0, 0]])  # category, attributes, satisfies (30 > 25)


def test_snapshot_round_trip(tmp_path):
    c = hand_catalogue()
    c.write(tmp_path / "catalogue.parquet")
    back = Catalogue.read(tmp_path / "catalogue.parquet")
    assert back.frame.equals(c.frame)
    assert (
        back.search(Search(strategy="price_asc"), 10).tolist()
        == c.search(Search(strategy="price_asc"), 10).tolist()
    )


def test_build_counts_train_only_and_keeps_untrained_items():
    items = pl.DataFrame(
        {
            "item_id": ["x", "y", "z"],
            "category": ["c", "c", "d"],
            "attributes": [[], ["q"], None],
            "price": [1.0, 2.0, None],
        }
    )
    train = pl.DataFrame(
        {
            "user_id": ["u", "u", "v"],
            "item_id": ["y", "x", "y"],
            "ts": [
                datetime(2020, 1, 1, tzinfo=UTC),
                datetime(2020, 1, 3, tzinfo=UTC),
                datetime(2020, 1, 2, tzinfo=UTC),
            ],
        }
    )
    c = Catalogue.build(items, train)
    assert c.item_ids == ["x", "y", "z"]
    assert c.popularity.tolist() == [1, 2, 0]
    assert c.recency[0] > c.recency[1] and c.recency[2] == -np.inf  # x seen last, z never
    assert c.attributes == ["q"] and c.categories == ["c", "d"]
