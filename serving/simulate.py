"""Simulated shoppers for a running server: sampled ``/v1/act`` requests of given users, and
clicks drawn from a known click model posted to ``/v1/events``.

Used by ``parpo demo`` (clicks from the synthetic world's true interest) to produce served
logs whose truth is known, so off-policy estimates on them can be checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

#: ``(user_ids [N], item_ids [N], positions [N]) -> P(click) [N]``.
ClickModel = Callable[[Sequence[str], Sequence[str], np.ndarray], np.ndarray]


def interest_clicks(interest: Callable[[Sequence[str], Sequence[str]], np.ndarray]) -> ClickModel:
    """P(click) = sigmoid(interest - 1) / sqrt(position): the user's true interest, discounted by
    the slot (``interest``: e.g. ``data_pipelines.synth.Truth(data).interest``)."""

    def p(users: Sequence[str], items: Sequence[str], positions: np.ndarray) -> np.ndarray:
        x = np.asarray(interest(users, items), dtype=np.float64)
        return 1.0 / (1.0 + np.exp(1.0 - x)) / np.sqrt(positions)

    return p


@dataclass
class Traffic:
    """What a simulation sent and logged."""

    answers: list[dict[str, Any]]  # the /v1/act answers, in request order
    impressions: int  # slate items shown
    clicks: int  # click events posted (each acknowledged with 2xx)


def simulate_traffic(
    base_url: str,
    users: Sequence[str],
    clicks: ClickModel,
    *,
    k: int = 5,
    concurrency: int = 8,
    seed: int | np.random.Generator = 0,
    request_prefix: str = "sim",
    timeout_s: float = 120.0,
) -> Traffic:
    """One ``/v1/act`` request per entry of ``users`` (``concurrency`` at a time, so the server
    micro-batches them), then a click event for each shown item a Bernoulli draw of
    ``clicks`` selects (``seed``: a seed or a generator to continue). Raises on any non-2xx
    answer (nothing is silently lost)."""
    import httpx

    rng = np.random.default_rng(seed)
    bodies = [
        {"request_id": f"{request_prefix}-{i + 1}", "user_id": str(u), "k": k} for i, u in enumerate(users)
    ]
    with (
        httpx.Client(base_url=base_url, timeout=timeout_s) as client,
        ThreadPoolExecutor(concurrency) as pool,
    ):

        def act(body: dict[str, Any]) -> dict[str, Any]:
            res = client.post("/v1/act", json=body)
            res.raise_for_status()
            return res.json()

        answers = list(pool.map(act, bodies))
        shown = [(a["request_id"], b["user_id"], s) for a, b in zip(answers, bodies, strict=True)
                 for s in a.get("slate", [])]  # fmt: skip
        if not shown:
            return Traffic(answers, 0, 0)
        p = clicks([u for _, u, _ in shown], [s["item_id"] for _, _, s in shown],
                   np.array([s["position"] for _, _, s in shown], dtype=np.float64))  # fmt: skip
        hits = [(rid, s) for (rid, _, s), hit in zip(shown, rng.random(len(shown)) < p, strict=True) if hit]
        for rid, s in hits:
            client.post(
                "/v1/events", json={"request_id": rid, "position": s["position"], "event": "click"}
            ).raise_for_status()
    return Traffic(answers, len(shown), len(hits))
