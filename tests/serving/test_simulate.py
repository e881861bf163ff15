"""Simulated shoppers against a real server in a thread: every click posted is stored once."""

from __future__ import annotations

import numpy as np

from serving.app import create_app
from serving.config import ServeConfig
from serving.runner import serve_in_thread
from serving.segments import read_records
from serving.simulate import interest_clicks, simulate_traffic


def test_interest_clicks_is_the_documented_model():
    p = interest_clicks(lambda users, items: np.array([1.0, 1.0, 3.0]))
    got = p(["u"] * 3, ["a", "b", "c"], np.array([1.0, 4.0, 1.0]))
    np.testing.assert_allclose(got, [0.5, 0.25, 1 / (1 + np.exp(-2.0))])


def test_traffic_is_served_logged_and_clicked_as_drawn(serve_registry, tmp_path):
    reg, _ = serve_registry
    users = ["u1", "u2", "u3", "nobody"] * 3  # an unknown user is served as cold
    app = create_app(reg, events=tmp_path / "ev", cfg=ServeConfig(poll_s=0, exploration={"samples": 4}))
    always = interest_clicks(lambda u, i: np.full(len(u), 50.0))  # P(click) = 1/sqrt(position)
    with serve_in_thread(app, timeout_s=120) as base:
        assert base.startswith("http://127.0.0.1:")
        traffic = simulate_traffic(base, users, always, k=3, seed=0, request_prefix="t")
    assert [a["request_id"] for a in traffic.answers] == [f"t-{i + 1}" for i in range(len(users))]
    positions = np.array([s["position"] for a in traffic.answers for s in a["slate"]], dtype=float)
    assert traffic.impressions == len(positions) > 0
    rng = np.random.default_rng(0)
    assert traffic.clicks == int((rng.random(len(positions)) < 1 / np.sqrt(positions)).sum())
    # The server stopped gracefully: both logs are flushed and hold exactly what was acknowledged.
    assert len(list(read_records(tmp_path / "ev" / "decisions"))) == len(users)
    clicks = list(read_records(tmp_path / "ev" / "events"))
    assert len(clicks) == traffic.clicks and not any(r["duplicate"] or r["unknown_request"] for r in clicks)
