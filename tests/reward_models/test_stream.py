"""The per-rank triple stream: disjoint shards of one global draw, epochs, exact resume."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from reward_models.curriculum import Curriculum
from reward_models.sampler import PopularityNegativeSampler
from reward_models.training.stream import TripleStream

KEYS = ("user", "pos", "neg", "neg_more_popular", "fallback", "pos_weight")


def stream(rank=0, world=1, batch=16, dcor=8) -> TripleStream:
    rng = np.random.default_rng(0)
    user = torch.from_numpy(rng.integers(0, 20, 100))
    item = torch.from_numpy(rng.integers(0, 30, 100))
    key = torch.unique(user * 30 + item)
    user, item = key // 30, key % 30
    s = PopularityNegativeSampler(user, item, 20, 30, generator=torch.Generator().manual_seed(5))
    return TripleStream(s, Curriculum(margin=3.0), batch, seed=1, rank=rank, world=world, dcor_sample=dcor)


def test_ranks_see_disjoint_shards_of_the_global_batch():
    one = list(stream())
    ranks = [list(stream(r, 3)) for r in range(3)]
    assert [len(r) for r in ranks] == [len(one)] * 3
    for b, whole in enumerate(one):
        for k in KEYS:
            torch.testing.assert_close(torch.cat([r[b][k] for r in ranks]), whole[k])
        for r in ranks:  # the dCor subsample is drawn from the global batch, the same on every rank
            torch.testing.assert_close(r[b]["sub_user"], whole["sub_user"])
            torch.testing.assert_close(r[b]["sub_item"], whole["sub_item"])
            assert r[b]["norm"] == len(whole["user"]) / 3


def test_epochs_advance_even_when_the_loader_stops_at_len():
    """Lightning stops after len() batches without asking for StopIteration."""
    s = stream()
    first = list(itertools.islice(iter(s), len(s)))
    second = list(itertools.islice(iter(s), len(s)))
    assert first[0]["epoch"] == 0 and second[0]["epoch"] == 1
    assert first[0]["margin"] == 3.0 and second[0]["margin"] == 3.0 * 0.9
    assert not torch.equal(first[0]["user"], second[0]["user"])  # a fresh permutation


def test_resume_mid_epoch_and_at_epoch_end_is_exact():
    ref = stream()
    epochs = [list(ref) for _ in range(3)]
    flat = [b for e in epochs for b in e]
    n = len(epochs[0])
    for done in (3, n, n + 2):  # mid-epoch, exactly at an epoch end, mid next epoch
        s = stream()
        it = iter(s)
        for consumed in range(done):
            if consumed and consumed % n == 0:
                it = iter(s)
            b = next(it)
            s.mark_consumed(b["epoch"], b["index"])
        state = s.state_dict()
        r = stream()
        r.load_state_dict(state)
        nxt = next(iter(r))
        want = flat[done]
        assert (nxt["epoch"], nxt["index"]) == (want["epoch"], want["index"])
        for k in KEYS:
            torch.testing.assert_close(nxt[k], want[k])


def test_click_weights_turn_the_side_choice_back_into_uniform_negatives():
    """w = q / p_more on the more popular side, (1 - q) / (1 - p_more) on the other, where q is the
    share of the catalogue beyond the margin that lies on the more popular side (by brute force)."""
    s = stream(batch=100)
    s.click_correction = True
    pop = s.sampler.pop.numpy()
    for b in s:
        margin = b["margin"]
        for k in range(len(b["user"])):
            p_i = pop[int(b["pos"][k])]
            n_more, n_less = (pop > p_i + margin).sum(), (pop < p_i - margin).sum()
            if b["fallback"][k] or n_more == 0 or n_less == 0:
                want = 1.0
            else:
                q = n_more / (n_more + n_less)
                want = q / 0.5 if b["neg_more_popular"][k] else (1 - q) / 0.5
            assert float(b["click_weight"][k]) == pytest.approx(want, rel=1e-6)


def test_dcor_subsample_is_distinct_rows_of_the_batch():
    for b in stream(batch=40, dcor=8):
        for key, source in (("sub_user", b["user"]), ("sub_item", torch.cat([b["pos"], b["neg"]]))):
            sub = b[key]
            distinct = torch.unique(source)
            assert sub.numel() == min(8, distinct.numel()) and torch.unique(sub).numel() == sub.numel()
            assert torch.isin(sub, distinct).all()
