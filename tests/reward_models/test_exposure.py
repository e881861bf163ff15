"""Impressions as negatives: which pairs qualify, the per-epoch triples, the held-out log-loss, the stream."""

from __future__ import annotations

import math
from datetime import timedelta

import numpy as np
import polars as pl
import pytest
import torch

from data_pipelines.dataset import Dataset
from data_pipelines.metrics import csr_from_pairs
from reward_models.curriculum import Curriculum
from reward_models.data import RewardData
from reward_models.exposure import (
    Exposure,
    ImpressionTriples,
    exposure_logloss,
    impression_pairs,
    load_exposure,
    pair_uniform,
)
from reward_models.sampler import PopularityNegativeSampler
from reward_models.training.stream import TripleStream
from tests.data_pipelines.splits.helpers import T0, make_dataset


def test_impression_triples_pair_each_impression_with_a_train_positive_of_its_user():
    # user 0 likes {1, 2}; user 1 likes {0}; impressions (0, 3), (0, 4), (1, 2)
    train = csr_from_pairs([0, 0, 1], [1, 2, 0], 2)
    ex = Exposure(np.array([0, 0, 1]), np.array([3, 4, 2]), np.zeros(0, np.int64), np.zeros(0, np.int64))
    pop = torch.tensor([5.0, 1.0, 2.0, 9.0, 0.0])
    imp = ImpressionTriples(ex, train, pop, weight=2.5)
    parts = imp.epoch(2, torch.Generator().manual_seed(0))
    assert [len(p["user"]) for p in parts] == [1, 2]  # near-equal slices, every impression once
    got = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    pairs = sorted(zip(got["user"].tolist(), got["neg"].tolist(), strict=True))
    assert pairs == [(0, 3), (0, 4), (1, 2)]
    for u, i, j, more in zip(got["user"], got["pos"], got["neg"], got["neg_more_popular"], strict=True):
        assert int(i) in {0: {1, 2}, 1: {0}}[int(u)]
        assert bool(more) == bool(pop[j] > pop[i])
    assert torch.all(got["pos_weight"] == 2.5) and not got["fallback"].any()
    assert torch.all(got["click_weight"] == 1.0)
    assert "impression" not in got  # flagged only for the pointwise log-loss
    flagged = ImpressionTriples(ex, train, pop, weight=2.5, pointwise=True).epoch(1, torch.Generator())[0]
    assert flagged["impression"].tolist() == [True, True, True]


def test_exposure_logloss_by_hand():
    # one user: valid positive item 0 (score 2), held-out impressions items 1 (score 0) and 2 (score 3)
    user = torch.tensor([[1.0, 0.0]])
    item = torch.tensor([[2.0, 0.0], [0.0, 5.0], [3.0, 0.0]])
    valid = csr_from_pairs([0], [0], 1)
    ex = Exposure(np.zeros(0, np.int64), np.zeros(0, np.int64), np.array([0, 0]), np.array([1, 2]))
    loss, pairs = exposure_logloss(user, item, valid, ex)
    want = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(1.0))) / 2
    assert pairs == 2 and loss == pytest.approx(want, rel=1e-6)
    assert exposure_logloss(user, item, valid, ex, users=np.array([5]))[1] == 0


def test_pair_uniform_is_stable_and_seeded():
    u, i = np.arange(10_000) % 97, np.arange(10_000) // 97
    a = pair_uniform(u, i, 200, 0)
    assert np.array_equal(a, pair_uniform(u, i, 200, 0))
    assert not np.array_equal(a, pair_uniform(u, i, 200, 1))
    assert a.min() > 0.0 and a.max() < 1.0 and abs(a.mean() - 0.5) < 0.02


def test_load_exposure_keeps_only_impressions_without_a_positive(tiny_synth):
    data = RewardData.load(tiny_synth, "intervened")
    ex = load_exposure(Dataset(tiny_synth), data, 0.1)
    assert ex is not None and ex.n_train > 0 and ex.valid_user.size > 0
    n = data.n_items
    pos = set()
    for part in (data.train, data.valid, data.test):
        pos |= set((part.row_ids() * n + part.indices).tolist())
    train = set((ex.train_user * n + ex.train_item).tolist())
    held = set((ex.valid_user * n + ex.valid_item).tolist())
    assert not train & pos and not held & pos and not train & held
    assert data.seen_users()[ex.train_user].all()  # a training triple needs a positive of its user
    share = len(held) / (len(held) + len(train))
    assert 0.05 < share < 0.15


def test_impression_pairs_are_the_distinct_pairs_over_every_partition(tmp_path):
    # Two ingests: two partitions, (u0, i1) shown in both, (u1, i0) twice in one.
    def rows(pairs):
        return pl.DataFrame(
            {
                "user_id": [u for u, _, _ in pairs],
                "item_id": [i for _, i, _ in pairs],
                "ts": [T0 + timedelta(minutes=k) for k in range(len(pairs))],
                "event": [e for _, _, e in pairs],
            }
        )

    make_dataset(
        tmp_path / "ds", rows([("u0", "i0", "click"), ("u0", "i1", "impression"), ("u1", "i0", "impression")])
    )
    ds = make_dataset(
        tmp_path / "ds",
        rows(
            [
                ("u0", "i1", "impression"),
                ("u1", "i0", "impression"),
                ("u1", "i2", "impression"),
                ("u1", "i1", "click"),
            ]
        ),
    )
    assert len(ds.partition_paths()) == 2
    data = RewardData.load(ds, "temporal")
    u, i = impression_pairs(ds, data)
    users, items = data.user_ids(), data.item_ids()
    assert [(users[a], items[b]) for a, b in zip(u, i, strict=True)] == [
        ("u0", "i1"),
        ("u1", "i0"),
        ("u1", "i2"),
    ]


def _stream(imp: ImpressionTriples | None, rank=0, world=1) -> TripleStream:
    user = torch.tensor([0, 0, 1, 2, 2, 3])
    item = torch.tensor([0, 1, 1, 2, 3, 0])
    s = PopularityNegativeSampler(user, item, 4, 8, generator=torch.Generator().manual_seed(3))
    return TripleStream(s, Curriculum(margin=0.0), 4, rank=rank, world=world, impressions=imp)


def test_stream_appends_impressions_and_shards_and_resumes():
    train = csr_from_pairs([0, 0, 1, 2, 2, 3], [0, 1, 1, 2, 3, 0], 4)
    ex = Exposure(
        np.array([0, 1, 2, 3, 3]), np.array([5, 6, 7, 4, 5]), np.zeros(0, np.int64), np.zeros(0, np.int64)
    )
    pop = torch.bincount(torch.tensor([0, 1, 1, 2, 3, 0]), minlength=8)

    def mk() -> ImpressionTriples:
        return ImpressionTriples(ex, train, pop, 1.0)

    plain, full = list(_stream(None)), list(_stream(mk()))
    assert len(full) == len(plain) == 2
    for p, f in zip(plain, full, strict=True):
        b = len(p["user"])
        assert torch.equal(f["user"][:b], p["user"])  # the sampled part is unchanged
        assert f["norm"] == len(f["user"])
    assert sum(len(f["user"]) - len(p["user"]) for p, f in zip(plain, full, strict=True)) == 5
    # the pointwise flag: False on the sampled part, True on the appended impressions
    for p, f in zip(plain, _stream(ImpressionTriples(ex, train, pop, 1.0, pointwise=True)), strict=True):
        b = len(p["user"])
        assert not f["impression"][:b].any() and f["impression"][b:].all() and len(f["impression"]) > b
    ranks = [list(_stream(mk(), r, 2)) for r in range(2)]
    for b, whole in enumerate(full):
        torch.testing.assert_close(torch.cat([r[b]["neg"] for r in ranks]), whole["neg"])
    # resume at the second batch of the first epoch: the same impressions are replayed
    s = _stream(mk())
    it = iter(s)
    next(it)
    s.mark_consumed(0, 0)
    state = s.state_dict()
    r = _stream(mk())
    r.load_state_dict(state)
    torch.testing.assert_close(next(iter(r))["neg"], full[1]["neg"])
