"""Each view on a hand-made tiny log, values worked out by hand."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import polars as pl
import pytest
import torch

from reward_models.profile import ProfileLog, ViewSpec, build_spec, build_views, feature_matrix, item_side
from reward_models.profile import views as views_mod
from reward_models.profile.views import DAY, fit_scales

ITEMS = pl.DataFrame(
    {
        "item_id": ["i0", "i1", "i2"],
        "category": ["a", "b", None],
        "attributes": [["x", "y"], ["z"], []],
        "price": [math.e, math.e**3, None],
    }
)
USERS = pl.DataFrame(
    {
        "user_id": ["u0", "u1", "u2"],
        "features": [
            [{"key": "age", "value": "20"}],
            [{"key": "gender", "value": "F"}, {"key": "age", "value": "40"}],
            [{"key": "gender", "value": "F"}, {"key": "zip", "value": "ab-123"}],
        ],
    }
)
REF = 3 * DAY
INDEX = {"i0": 0, "i1": 1, "i2": 2}


def t(days: float) -> datetime:
    return datetime.fromtimestamp(days * DAY, tz=UTC)


@pytest.fixture
def spec() -> ViewSpec:
    return build_spec(ITEMS, USERS, REF)


def log_frame() -> pl.DataFrame:
    # u0: click i0 (day 0), impression i1 (dropped), buy i1 (day 2), click i0 (day 2); u1: nothing
    return pl.DataFrame(
        {
            "user_id": ["u0", "u0", "u0", "u0"],
            "item_id": ["i0", "i1", "i1", "i0"],
            "event": ["click", "impression", "buy", "click"],
            "ts": [t(0), t(1), t(2), t(2)],
        }
    )


def test_spec_vocabularies(spec):
    assert spec.categories == ["a", "b"]
    assert spec.attributes == ["x", "y", "z"]
    assert spec.numeric_features == ["age"]
    assert spec.numeric_mean == [30.0] and spec.numeric_std == [10.0]
    assert spec.feature_values == ["gender=F"]  # zip=ab-123 seen once: dropped
    assert spec.has_price
    assert spec.names == ["events", "activity", "content", "price", "features"]


def test_each_view_by_hand(spec):
    side = item_side(spec, ITEMS, INDEX, 3)
    np.testing.assert_allclose(side.log_price, [-1.0, 1.0, 0.0])  # log prices 1 and 3, standardised
    log = ProfileLog.from_frame(log_frame(), spec, ["u0", "u1"], INDEX)
    assert log.row.tolist() == [0, 0, 0]  # the impression is not evidence of taste
    feats = feature_matrix(spec, [{"age": "20"}, {"gender": "F", "age": "40"}])
    np.testing.assert_allclose(feats, [[0.0, -1.0], [1.0, 1.0]])
    pop = torch.tensor([4.0, 0.0, 9.0])
    views, mask = build_views(spec, log, side, pop, feats)

    e = spec.events
    ev = np.zeros(len(e))
    ev[e.index("click")], ev[e.index("buy")] = 2 / 3, 1 / 3
    np.testing.assert_allclose(views["events"][0], ev, rtol=1e-6)
    act = [math.log1p(3), math.log1p(2), math.log1p(2), math.log1p(1), 2 * math.log1p(4) / 3]
    np.testing.assert_allclose(views["activity"][0], act, rtol=1e-6)
    np.testing.assert_allclose(views["content"][0], [2 / 3, 1 / 3, 2 / 3, 2 / 3, 1 / 3], rtol=1e-6)
    np.testing.assert_allclose(views["price"][0], [-1 / 3, math.sqrt(8 / 9)], rtol=1e-6)
    np.testing.assert_allclose(views["features"], feats)
    assert mask.tolist() == [[True, True, True, True, True], [False, False, False, False, True]]
    assert all(torch.isfinite(v).all() for v in views.values())


def test_views_gathered_a_chunk_of_events_at_a_time_are_the_same(spec, monkeypatch):
    side = item_side(spec, ITEMS, INDEX, 3)
    log = ProfileLog.from_frame(log_frame(), spec, ["u0", "u1"], INDEX)
    feats = feature_matrix(spec, [{"age": "20"}, {"gender": "F", "age": "40"}])
    whole, _ = build_views(spec, log, side, torch.tensor([4.0, 0.0, 9.0]), feats)
    monkeypatch.setattr(views_mod, "EVENT_CHUNK", 1)  # one event per gather
    chunked, _ = build_views(spec, log, side, torch.tensor([4.0, 0.0, 9.0]), feats)
    assert all(torch.equal(whole[k], chunked[k]) for k in whole)
    assert whole["content"].abs().sum() > 0


def test_untyped_events_and_unknown_items(spec):
    """A bare list of item ids (no event types): activity yes, event mix no; unknown items no content."""
    side = item_side(spec, ITEMS, INDEX, 3)
    log = ProfileLog(
        1, torch.tensor([0, 0]), torch.tensor([-1, 2]), torch.tensor([-1, -1]), torch.full((2,), math.nan)
    )
    views, mask = build_views(spec, log, side, torch.zeros(3), None)
    assert mask[0].tolist() == [False, True, True, False, False]  # i2 has no category, attributes or price
    assert views["content"].abs().sum() == 0
    np.testing.assert_allclose(views["activity"][0, :4], [math.log1p(2), math.log1p(2), 0.0, 0.0], rtol=1e-6)


def test_activity_scales(spec):
    raw = torch.tensor([[1.0, 2, 3, 4, 5], [3.0, 2, 1, 0, 5], [9.0, 9, 9, 9, 9]])
    s = fit_scales(spec, raw, torch.tensor([True, True, False]))
    np.testing.assert_allclose(s.activity_mean, [2, 2, 2, 2, 5])
    np.testing.assert_allclose(s.activity_std, [1, 1e-6, 1, 2, 1e-6], rtol=1e-6)
