"""Popularity-aware negative sampler (DICE) and its curriculum: hand values and invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reward_models.curriculum import Curriculum, CurriculumStep
from reward_models.sampler import PopularityNegativeSampler, Triples, popularity_weights
from tests.plugins.data import real_data


def make(user, item, n_users, n_items, seed=0, **kw) -> PopularityNegativeSampler:
    g = torch.Generator().manual_seed(seed)
    return PopularityNegativeSampler(
        torch.as_tensor(user), torch.as_tensor(item), n_users, n_items, generator=g, **kw
    )


def random_data(seed: int, n_users: int, n_items: int, density: float):
    """Random positives (each user keeps at least one non-positive) and a Zipf-ish popularity."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_items + 1) ** 1.1
    pairs = []
    for u in range(n_users):
        k = int(rng.integers(1, max(2, int(density * n_items)) + 1))
        k = min(k, n_items - 1)
        items = rng.choice(n_items, size=k, replace=False, p=weights / weights.sum())
        pairs += [(u, int(i)) for i in items]
    arr = np.array(pairs, dtype=np.int64)
    return arr[:, 0], arr[:, 1]


def brute_candidates(pop: np.ndarray, positives: set[int], p: float, margin: float):
    """The two sides of a positive with count ``p``, minus the user's positives (the reference semantics)."""
    items = np.arange(len(pop))
    free = np.array([i not in positives for i in items])
    more = items[(pop > p + margin) & free]
    less = items[(pop < p - margin) & free]
    return set(more.tolist()), set(less.tolist()), set(items[free].tolist())


def check_invariants(s: PopularityNegativeSampler, t: Triples, margin: float, p_more: float | None = None):
    pop = s.pop.numpy()
    user, pos, neg = t.user.numpy(), t.pos.numpy(), t.neg.numpy()
    by_user: dict[int, set[int]] = {}
    for u, i in zip(s.user.tolist(), s.item.tolist(), strict=True):
        by_user.setdefault(u, set()).add(i)
    # The mask is the comparison on the true counts, for every triple.
    assert np.array_equal(t.neg_more_popular.numpy(), pop[neg] > pop[pos])
    for k in range(len(t)):
        u, i, j = int(user[k]), int(pos[k]), int(neg[k])
        assert j not in by_user[u], f"triple {k}: negative {j} is a positive of user {u}"
        more, less, free = brute_candidates(pop, by_user[u], pop[i], margin)
        if t.fallback[k]:
            assert not more and not less, f"triple {k}: fallback although a side had a candidate"
            assert j in free
        elif t.neg_more_popular[k]:
            assert j in more and pop[j] > pop[i] + margin
            if p_more == 0.0:
                assert not less, (
                    f"triple {k}: more popular side drawn although p_more=0 and a less popular candidate existed"
                )
        else:
            assert j in less and pop[j] < pop[i] - margin
            if p_more == 1.0:
                assert not more, (
                    f"triple {k}: less popular side drawn although p_more=1 and a more popular candidate existed"
                )


# ---------------------------------------------------------------------- hand values


def test_side_plan_hand_values():
    # Counts 0, 1, 1, 3, 5, 8 (already sorted). Margin 1: item 3 (count 3) has the less popular
    # side {count < 2} = items 0..2 and the more popular side {count > 4} = items 4, 5.
    pop = torch.tensor([0, 1, 1, 3, 5, 8])
    s = make([0, 1], [3, 5], 2, 6, popularity=pop)
    plan = s.side_plan(1.0)
    assert plan.lo_end.tolist() == [0, 0, 0, 3, 4, 5]
    assert plan.hi_start.tolist() == [3, 3, 3, 4, 5, 6]
    assert plan.fallback.tolist() == [False] * 6
    # Row 2 * item + coin. Item 0 has only the more popular side; item 5 only the less popular one.
    assert plan.start.view(6, 2).tolist() == [[3, 3], [3, 3], [3, 3], [0, 4], [0, 5], [0, 0]]
    assert plan.width.view(6, 2).tolist() == [[3, 3], [3, 3], [3, 3], [3, 2], [4, 1], [5, 5]]
    assert plan.more.view(6, 2)[0].tolist() == [True, True]
    assert plan.more.view(6, 2)[5].tolist() == [False, False]
    # Margin 2.5 on integer counts: item 3 now has less = {count < 0.5} = item 0, more = {count > 5.5} = item 5.
    plan = s.side_plan(2.5)
    assert plan.lo_end[3] == 1 and plan.hi_start[3] == 5


def test_sides_with_a_single_candidate_are_forced():
    # User 0's positive is item 3 (count 3); with margin 1 the free candidates are less = {0, 1, 2},
    # more = {4, 5} minus user 0's positive 5 = {4}. p_more=1: always item 4.
    pop = torch.tensor([0, 1, 1, 3, 5, 8])
    s = make([0, 0], [3, 5], 1, 6, popularity=pop, p_more=1.0)
    t = s.sample(torch.zeros(200, dtype=torch.int64), margin=1.0)
    assert set(t.neg.tolist()) == {4}
    assert t.neg_more_popular.all() and not t.fallback.any()
    s = make([0, 0], [3, 5], 1, 6, popularity=pop, p_more=0.0)
    t = s.sample(torch.zeros(300, dtype=torch.int64), margin=1.0)
    assert set(t.neg.tolist()) == {0, 1, 2}
    assert not t.neg_more_popular.any()


def test_side_crowded_by_user_positives_gives_way():
    # Counts 3, 6, 7, 0, 3; user 0's positives are items 0, 1, 2. For the positive (0, item 0) and
    # margin 1 the more popular side {6, 7} = items 1, 2 holds only positives, so even with p_more=1
    # every negative comes from the less popular side {count < 2} = item 3 (after the rejection
    # rounds fail, the exact step counts the positives and swaps sides).
    pop = torch.tensor([3, 6, 7, 0, 3])
    s = make([0, 0, 0], [0, 1, 2], 1, 5, popularity=pop, p_more=1.0, max_rounds=2)
    t = s.sample(torch.zeros(50, dtype=torch.int64), margin=1.0)
    assert set(t.neg.tolist()) == {3}
    assert not t.fallback.any() and not t.neg_more_popular.any()
    # The positive (0, item 1): less popular side {count < 5} = items 0, 3, 4 minus item 0; the more
    # popular side is empty (no count > 7).
    t = s.sample(torch.ones(100, dtype=torch.int64), margin=1.0)
    assert set(t.neg.tolist()) == {3, 4} and not t.fallback.any() and not t.neg_more_popular.any()
    # With margin 3.5 item 0 has no less popular side (count < -0.5) and a crowded more popular one
    # (count > 6.5 = item 2): a fallback, drawn from the non-positives 3 (count 0) and 4 (count 3, a
    # tie): neither is more popular.
    t = s.sample(torch.zeros(100, dtype=torch.int64), margin=3.5)
    assert t.fallback.all() and set(t.neg.tolist()) == {3, 4} and not t.neg_more_popular.any()


def test_fallback_when_all_counts_are_equal():
    # Every item has count 2: no side exists for any margin, every negative is a uniform non-positive.
    user = [0, 0, 1, 1, 2, 2]
    item = [0, 1, 2, 3, 4, 5]
    s = make(user, item, 3, 6, popularity=torch.full((6,), 2))
    t = s.sample(torch.arange(6).repeat(100), margin=0.0)
    assert t.fallback.all()
    assert not t.neg_more_popular.any()  # ties are not "more popular"
    for u in range(3):
        negs = set(t.neg[t.user == u].tolist())
        assert negs == set(range(6)) - {2 * u, 2 * u + 1}


def test_weights_pass_through_and_reweighting():
    pop = torch.tensor([1, 2, 4, 8])
    w = torch.tensor([0.5, 1.0, 2.0, 3.0])
    s = make([0, 1, 2, 3], [0, 1, 2, 3], 4, 4, popularity=pop, weight=w, reweight_alpha=1.0)
    t = s.sample(torch.tensor([3, 0, 2]), margin=0.0)
    assert t.pos_weight.tolist() == [3.0, 0.5, 2.0]
    # interest: max/pop = 8, 4, 2, 1 -> mean 3.75; conformity: pop/max = 1/8 .. 1 -> mean 15/32.
    assert torch.allclose(t.int_weight, torch.tensor([1 / 3.75, 8 / 3.75, 2 / 3.75]))
    assert torch.allclose(t.con_weight, torch.tensor([1.0, 0.125, 0.5]) / (15 / 32))
    off = make([0, 1, 2, 3], [0, 1, 2, 3], 4, 4, popularity=pop)
    t = off.sample(margin=0.0)
    assert t.pos_weight.tolist() == [1.0] * 4
    assert t.int_weight.tolist() == [1.0] * 4 and t.con_weight.tolist() == [1.0] * 4


def test_popularity_weights_hand_values():
    pop = torch.tensor([0, 1, 4])  # count 0 is clamped to 1
    w = popularity_weights(pop, torch.tensor([1, 2, 2, 0]), "interest", alpha=0.5)
    raw = torch.tensor([2.0, 1.0, 1.0, 2.0])  # sqrt(4 / 1), sqrt(4 / 4), ..., sqrt(4 / 1)
    assert torch.allclose(w, raw / raw.mean())
    w = popularity_weights(pop, torch.tensor([1, 2]), "conformity", alpha=1.0)
    assert torch.allclose(w, torch.tensor([0.25, 1.0]) / 0.625)
    assert torch.allclose(w.mean(), torch.tensor(1.0))
    with pytest.raises(ValueError, match="unknown mode"):
        popularity_weights(pop, torch.tensor([1]), "both")  # type: ignore[arg-type]


def test_popularity_defaults_to_train_counts():
    s = make([0, 0, 1, 2, 2, 2], [0, 1, 1, 1, 2, 0], 3, 4)
    assert s.pop.tolist() == [2.0, 3.0, 1.0, 0.0]


# ---------------------------------------------------------------------- invariants


@pytest.mark.parametrize("max_rounds", [0, 1, 4])
@pytest.mark.parametrize("margin", [0.0, 1.0, 3.5, 12.0])
def test_invariants_exhaustive_on_random_data(max_rounds, margin):
    user, item = random_data(seed=7, n_users=40, n_items=30, density=0.4)
    s = make(user, item, 40, 30, seed=3, max_rounds=max_rounds)
    # 20 draws of every positive: dense users (40% of the catalogue) crowd their sides.
    t = s.sample(torch.arange(len(s)).repeat(20), margin=margin)
    check_invariants(s, t, margin)


@pytest.mark.parametrize("p_more", [0.0, 1.0])
def test_coin_side_is_used_whenever_it_has_a_candidate(p_more):
    user, item = random_data(seed=11, n_users=30, n_items=25, density=0.5)
    s = make(user, item, 30, 25, seed=5, p_more=p_more, max_rounds=1)
    t = s.sample(torch.arange(len(s)).repeat(10), margin=2.0)
    check_invariants(s, t, 2.0, p_more=p_more)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n_users=st.integers(1, 12),
    n_items=st.integers(2, 25),
    density=st.floats(0.05, 0.9),
    margin=st.sampled_from([0.0, 0.5, 1.0, 2.0, 5.0, 100.0]),
    max_rounds=st.integers(0, 3),
    p_more=st.sampled_from([0.0, 0.3, 0.5, 1.0]),
)
def test_invariants_property(seed, n_users, n_items, density, margin, max_rounds, p_more):
    user, item = random_data(seed, n_users, n_items, density)
    s = make(user, item, n_users, n_items, seed=seed, max_rounds=max_rounds, p_more=p_more)
    t = s.sample(torch.arange(len(s)).repeat(5), margin=margin)
    check_invariants(s, t, margin, p_more=p_more)


@settings(max_examples=60, deadline=None)
@given(
    positives=st.sets(st.integers(0, 39), max_size=39),
    a=st.integers(0, 39),
    data=st.data(),
)
def test_kth_free_matches_enumeration(positives, a, data):
    # One user with the given positive ranks (popularity = item index, so rank == item); a second
    # user around it checks that segments do not leak.
    n = 40
    items = sorted(positives) or [0]
    user = [1] * len(items) + [0, 2]
    item = items + [a, (a + 7) % n]
    s = make(user, item, 3, n, popularity=torch.arange(n))
    free = [r for r in range(a, n) if r not in set(items)]
    if not free:
        return
    k = data.draw(st.integers(0, len(free) - 1))
    got = s._kth_free(torch.tensor([1]), torch.tensor([a]), torch.tensor([k]))
    assert got.item() == free[k]


def test_draws_are_uniform_over_the_side_without_positives():
    # Positive (0, item 0) of count 1; the more popular side is items 1..19 minus the user's
    # positives {3, 4, 10}: 16 candidates, each drawn ~1/16 of the time, by rejection and exactly.
    pop = torch.arange(1, 21)
    for max_rounds in (4, 0):
        s = make([0, 0, 0, 0], [0, 3, 4, 10], 1, 20, popularity=pop, max_rounds=max_rounds, seed=42)
        t = s.sample(torch.zeros(32_000, dtype=torch.int64), margin=0.0)
        counts = torch.bincount(t.neg, minlength=20)
        assert counts[[0, 3, 4, 10]].sum() == 0
        expected = 32_000 / 16
        chi2 = (((counts[counts > 0].double() - expected) ** 2) / expected).sum().item()
        assert (counts > 0).sum() == 16
        assert chi2 < 45.0, f"max_rounds={max_rounds}: chi2={chi2:.1f} with 15 dof"  # p ~ 1e-4


def test_side_coin_frequency():
    # Both sides always have candidates here, so the more popular side comes up with probability p_more.
    pop = torch.arange(100)
    s = make([0], [50], 1, 100, popularity=pop, p_more=0.3, seed=1)
    t = s.sample(torch.zeros(20_000, dtype=torch.int64), margin=5.0)
    frac = t.neg_more_popular.double().mean().item()
    assert abs(frac - 0.3) < 0.015


# ---------------------------------------------------------------------- epochs and determinism


def test_epoch_covers_every_positive_once():
    user, item = random_data(seed=2, n_users=50, n_items=40, density=0.2)
    s = make(user, item, 50, 40, chunk_size=64)
    batches = list(s.epoch(2.0, 30))
    assert [len(b) for b in batches[:-1]] == [30] * (len(batches) - 1)
    assert sum(len(b) for b in batches) == len(s)
    got_user, got_pos = torch.cat([b.user for b in batches]), torch.cat([b.pos for b in batches])
    seen = sorted(zip(got_user.tolist(), got_pos.tolist(), strict=True))
    assert seen == sorted(zip(user.tolist(), item.tolist(), strict=True))
    dropped = list(s.epoch(2.0, 30, drop_last=True))
    assert all(len(b) == 30 for b in dropped) and len(dropped) == len(s) // 30


def test_same_seed_same_triples_and_chunking_is_invisible_to_the_seed_only():
    user, item = random_data(seed=4, n_users=30, n_items=30, density=0.3)
    a = [b.neg for b in make(user, item, 30, 30, seed=9).epoch(1.0, 16)]
    b = [b.neg for b in make(user, item, 30, 30, seed=9).epoch(1.0, 16)]
    c = [b.neg for b in make(user, item, 30, 30, seed=10).epoch(1.0, 16)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))


def test_generator_state_resume_is_exact():
    user, item = random_data(seed=5, n_users=30, n_items=30, density=0.3)
    s = make(user, item, 30, 30, seed=1, max_rounds=1)
    s.sample(torch.arange(20), margin=3.0)
    state = s.generator.get_state()
    first = [s.sample(torch.arange(len(s)), margin=3.0)] + list(s.epoch(1.5, 17))
    s.generator.set_state(state)
    again = [s.sample(torch.arange(len(s)), margin=3.0)] + list(s.epoch(1.5, 17))
    for x, y in zip(first, again, strict=True):
        for f in ("user", "pos", "neg", "neg_more_popular", "fallback"):
            assert torch.equal(getattr(x, f), getattr(y, f))
    # A fresh sampler given the saved state continues the same stream.
    other = make(user, item, 30, 30, seed=123, max_rounds=1)
    other.generator.set_state(state)
    assert torch.equal(other.sample(torch.arange(len(s)), margin=3.0).neg, first[0].neg)


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="every item"):
        make([0, 0], [0, 1], 1, 2)
    with pytest.raises(ValueError, match="outside"):
        make([0], [5], 1, 3)
    s = make([0], [0], 1, 3)
    with pytest.raises(ValueError, match="margin"):
        s.sample(margin=-1.0)
    with pytest.raises(ValueError, match="batch_size"):
        list(s.epoch(0.0, 0))


# ---------------------------------------------------------------------- curriculum


def test_curriculum_hand_values():
    c = Curriculum(margin=40.0, margin_decay=0.9, int_weight=0.1, con_weight=0.2, loss_decay=0.5)
    assert c.margin_at(0) == 40.0
    assert math.isclose(c.margin_at(1), 36.0)
    assert math.isclose(c.margin_at(3), 40.0 * 0.729)
    assert c.weights_at(0) == (0.1, 0.2)
    w_int, w_con = c.weights_at(2)
    assert math.isclose(w_int, 0.025) and math.isclose(w_con, 0.05)
    step = c.at(1)
    assert isinstance(step, CurriculumStep) and step.epoch == 1
    assert (
        math.isclose(step.margin, 36.0)
        and math.isclose(step.int_weight, 0.05)
        and math.isclose(step.con_weight, 0.1)
    )
    # Defaults are the official DICE flags.
    d = Curriculum()
    assert (d.margin, d.margin_decay, d.int_weight, d.con_weight, d.loss_decay) == (40.0, 0.9, 0.1, 0.1, 0.9)
    assert Curriculum(margin=10.0, margin_decay=1.0).margin_at(50) == 10.0


def test_curriculum_rejects_bad_values():
    with pytest.raises(ValueError, match="margin_decay"):
        Curriculum(margin_decay=0.0)
    with pytest.raises(ValueError, match="loss_decay"):
        Curriculum(loss_decay=1.5)
    with pytest.raises(ValueError, match="margin"):
        Curriculum(margin=-1.0)
    with pytest.raises(ValueError, match="epoch"):
        Curriculum().margin_at(-1)


# ---------------------------------------------------------------------- real data


@pytest.mark.realdata
def test_invariants_on_amazon_beauty():
    path = real_data("amazon-beauty-5core-s3rec") / "Beauty.txt"
    users, items = [], []
    for line in path.read_text().splitlines():
        parts = line.split()
        users += [int(parts[0])] * (len(parts) - 1)
        items += [int(x) for x in parts[1:]]
    _, u = np.unique(np.array(users), return_inverse=True)
    _, i = np.unique(np.array(items), return_inverse=True)
    n_users, n_items = int(u.max()) + 1, int(i.max()) + 1
    s = make(u, i, n_users, n_items, seed=0)
    t = s.sample(margin=40.0)
    assert len(t) == 198_502
    # Vectorised checks over all triples: never a positive, mask = true comparison, margin kept.
    key = torch.unique(s.user * n_items + s.item)
    q = t.user * n_items + t.neg
    assert not torch.isin(q, key).any()
    pop = s.pop
    assert torch.equal(t.neg_more_popular, pop[t.neg] > pop[t.pos])
    gap = pop[t.neg] - pop[t.pos]
    side = ~t.fallback
    assert ((gap[side] > 40) | (gap[side] < -40)).all()
    assert 0.2 < t.neg_more_popular.double().mean().item() < 1.0
