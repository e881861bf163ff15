"""Warm-start helpers: id maps that extend, the train window, and the tables a warm start copies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
import torch

from parpo_core.errors import DataError
from reward_models.warmstart import TrainWindow, extends, parse_window, window_train


def test_extends_means_same_ids_at_same_indices():
    assert extends(["a", "b"], ["a", "b", "c"]) and extends([], ["x"]) and extends(["a"], ["a"])
    assert not extends(["a", "b"], ["b", "a", "c"]) and not extends(["a", "b"], ["a"])


def test_parse_window():
    assert parse_window("all") is None and parse_window("last:7d") == 7.0 and parse_window("last:0.5d") == 0.5
    for bad in ("last:0d", "last:7", "7d", "last:xd"):
        with pytest.raises(DataError, match="use 'all' or 'last:<N>d'"):
            parse_window(bad)


def test_window_keeps_the_last_days_and_a_stable_replay_share():
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    n = 2000
    frame = pl.DataFrame(
        {
            "user_id": [f"u{k % 50}" for k in range(n)],
            "item_id": [f"i{k % 37}" for k in range(n)],
            "ts": [t0 + timedelta(hours=k % 240) for k in range(n)],  # 10 days
        }
    )
    recent = frame.filter(pl.col("ts") > t0 + timedelta(hours=239) - timedelta(days=2))
    assert window_train(frame, TrainWindow(2.0, 0.0)).equals(recent)
    assert window_train(frame, TrainWindow(None)).equals(frame)
    half = window_train(frame, TrainWindow(2.0, 0.5))
    older = half.height - recent.height
    assert 0.35 * (n - recent.height) < older < 0.65 * (n - recent.height)
    assert half.equals(window_train(frame, TrainWindow(2.0, 0.5)))  # hash-stable
    assert window_train(frame, TrainWindow(2.0, 1.0)).height == n


def test_warm_start_copies_the_base_rows_by_id(published_reward, tiny_synth):
    from data_pipelines.dataset import Dataset
    from parpo_core.artefacts import Registry
    from reward_models.pipeline import cold_profiles, load_training_data
    from reward_models.readout import RewardModel
    from reward_models.warmstart import warm_start
    from tests.plugins.rewards import reward_config

    v = Registry(published_reward).open("reward")
    ds = Dataset(tiny_synth)
    data = load_training_data(reward_config(), ds)
    profiles = cold_profiles(data.cold_profile)
    warm = warm_start(v.path, ds, data, ("interest", "conformity"), profiles)
    base = RewardModel.load(v.path)
    seen = torch.from_numpy(warm.user_seen)
    d = base.user["interest"].shape[1]
    assert torch.equal(warm.user[seen][:, :d], base.user["interest"][seen])
    assert torch.equal(warm.user[seen][:, d:], base.user["conformity"][seen])
    assert torch.equal(torch.from_numpy(warm.user_seen), base.user_seen)
    assert warm.counts["users_copied"] == int(base.user_seen.sum())
