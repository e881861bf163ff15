"""Monte-Carlo propensities: by hand, and against empirical frequencies of the served slates."""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import pytest
import torch

from serving.acting import LoadedModel
from serving.propensity import position_propensities
from serving.schemas import ActRequest


def test_position_propensities_by_hand():
    samples = [["a", "b"], ["a", "c"], ["b", "a"], ["a"]]
    # position 1: "a" in 3 of 4 samples; position 2: "b" in 1 of 4.
    assert position_propensities(samples, ["a", "b"]) == [0.75, 0.25]
    assert position_propensities(samples, ["a"]) == [0.75]
    with pytest.raises(ValueError):
        position_propensities([], ["a"])


def test_logged_propensities_match_empirical_frequencies(serve_registry):
    """Over M identical requests, item i is served at position j with frequency f ~ p; given it
    was served, the logged propensity is (1 + Bin(N - 1, p)) / N. So the mean of
    (N * propensity - 1) / (N - 1) over the requests that served it estimates p too."""
    torch.set_num_threads(1)
    reg, _ = serve_registry
    model = LoadedModel.load(str(reg), None, seed=3)
    n, m = 10, 400
    # Three candidates and a slate of two: every (item, position) is likely enough to test.
    req = ActRequest(request_id="same", user_id="u0001", candidates=["i0001", "i0002", "i0003"], k=2)
    served: Counter[tuple[int, str]] = Counter()
    logged: dict[tuple[int, str], list[float]] = defaultdict(list)
    for _ in range(m // 50):
        for a in model.act([req] * 50, n, 1.0):
            if a.response["fallback"]:
                continue  # the policy's episode ended without a slate: no (item, position) served
            for s in a.response["slate"]:
                key = (s["position"], s["item_id"])
                served[key] += 1
                logged[key].append(s["propensity"])
    assert len(served) >= 3, "the policy must actually be stochastic here"
    for key, count in served.items():
        if count < 30:
            continue
        f = count / m
        est = (n * sum(logged[key]) / count - 1) / (n - 1)
        # Both are unbiased for p; the gap's standard error (binomial over m, and over count*(N-1)).
        se = math.sqrt(f * (1 - f) / m + f * (1 - f) / (count * (n - 1)))
        assert abs(est - f) <= 4 * se + 1e-9, (key, f, est, se)


def test_agents_per_temperature_are_bounded_and_never_reuse_a_seed(monkeypatch):
    """Clients choose ``explore`` freely: one agent per temperature, at most ``AGENT_LIMIT`` kept;
    an agent made again after eviction gets a fresh seed (else it would repeat earlier draws)."""
    import serving.acting as acting

    class Bundle:
        def agent(self, temperature: float, seed: int) -> tuple[float, int]:
            return (temperature, seed)

    monkeypatch.setattr(acting, "AGENT_LIMIT", 2)
    model = LoadedModel(Bundle(), seed=5)  # type: ignore[arg-type]
    assert [model._agent(t) for t in (1.0, 2.0, 1.0)] == [(1.0, 5), (2.0, 6), (1.0, 5)]
    assert model._agent(3.0) == (3.0, 7)  # evicts 2.0, the least recently used
    assert model._agent(2.0) == (2.0, 8)  # made again (evicting 1.0), with a seed of its own
    assert model._agent(3.0) == (3.0, 7)  # kept
    assert len(model._agents) == 2
