"""The response model: how a user reacts to a shown item (click, then the funnel).

    logit_click = click_bias + interest_weight * s(u, i) + c_u * pop_i + eps,   eps ~ N(0, noise_sd^2)
    pop_i       = log(1 + n_i / mean_j n_j)     (n_i: impressions of i before this round; 0 in round 0)
    P(cart | click) = sigmoid(logit(cart_rate) + funnel_interest_weight * s(u, i)), fav likewise
    P(buy | cart)   = sigmoid(logit(buy_rate)  + funnel_interest_weight * s(u, i))

Conformity acts on the click only: deeper funnel steps follow taste, not the crowd.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from data_pipelines.synth.config import SynthConfig


@dataclass(frozen=True)
class Responses:
    """Per-impression draws, all [N]."""

    noise: np.ndarray  # float64, eps
    logit: np.ndarray  # float64, click logit including eps
    click: np.ndarray  # bool
    cart: np.ndarray  # bool, implies click
    fav: np.ndarray  # bool, implies click
    buy: np.ndarray  # bool, implies cart


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def logit(p: float) -> float:
    return float(np.log(p / (1.0 - p)))


def popularity(exposure: np.ndarray) -> np.ndarray:
    """pop_i = log(1 + n_i / mean(n)) for exposure counts ``n`` ([I]); zeros before any exposure.

    Counts are taken relative to the catalogue mean so the conformity effect does not
    grow with the number of users.
    """
    mean = exposure.mean()
    if mean == 0:
        return np.zeros(exposure.shape, dtype=np.float64)
    return np.log1p(exposure / mean)


def respond(
    cfg: SynthConfig, rng: np.random.Generator, s: np.ndarray, c: np.ndarray, pop: np.ndarray
) -> Responses:
    """Draw responses for N impressions: true interest ``s``, conformity ``c`` and popularity ``pop``."""
    n = s.shape[0]
    noise = cfg.noise_sd * rng.standard_normal(n)
    z = cfg.click_bias + cfg.interest_weight * s + c * pop + noise
    draws = rng.random((4, n))
    click = draws[0] < sigmoid(z)
    f = cfg.funnel_interest_weight * s
    cart = click & (draws[1] < sigmoid(logit(cfg.cart_rate) + f))
    fav = click & (draws[2] < sigmoid(logit(cfg.fav_rate) + f))
    buy = cart & (draws[3] < sigmoid(logit(cfg.buy_rate) + f))
    return Responses(noise=noise, logit=z, click=click, cart=cart, fav=fav, buy=buy)
