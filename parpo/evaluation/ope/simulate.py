"""Simulated logged bandit feedback with a known truth, for tests and benchmarks.

A fixed environment (drawn from ``env_seed``): click probabilities q[c, a, p] with a
position discount, an evaluated policy pi_e (softmax of its own scores, correlated with q)
and a logging policy that mixes uniform with a different softmax, so every weight is at
most 1 / (mix / A) (20 at the defaults). Logs are drawn from ``seed``; the truth is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from parpo.evaluation.ope.feedback import LoggedFeedback


@dataclass(frozen=True)
class Environment:
    q: np.ndarray  # [C, A, P] true expected reward
    pi_e: np.ndarray  # [C, P, A] evaluated policy per context and position
    pi_b: np.ndarray  # [C, P, A] logging policy

    @property
    def truth(self) -> float:
        """V(pi_e) with contexts and positions uniform: mean_{c,p} sum_a pi_e q."""
        return float(np.einsum("cpa,cap->cp", self.pi_e, self.q).mean())


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def environment(
    n_contexts: int = 20, n_actions: int = 10, n_positions: int = 1, mix: float = 0.5, env_seed: int = 0
) -> Environment:
    rng = np.random.default_rng(env_seed)
    base = rng.normal(-1.5, 1.0, (n_contexts, n_actions, 1)) - 0.5 * np.arange(n_positions)
    q = 1.0 / (1.0 + np.exp(-base))
    scores = np.broadcast_to(base.transpose(0, 2, 1), (n_contexts, n_positions, n_actions))
    pi_e = _softmax(2.0 * scores + rng.normal(0, 1.0, scores.shape))
    pi_b = mix / n_actions + (1 - mix) * _softmax(rng.normal(0, 1.0, scores.shape))
    return Environment(q, pi_e, pi_b)


def simulate(env: Environment, n: int, seed: int) -> LoggedFeedback:
    """n logged rows: context and position uniform, action ~ pi_b, reward ~ Bernoulli(q)."""
    rng = np.random.default_rng(seed)
    n_contexts, n_actions, n_positions = env.q.shape
    c = rng.integers(0, n_contexts, n)
    p = rng.integers(0, n_positions, n)
    cdf = env.pi_b[c, p].cumsum(axis=1)
    a = np.minimum((rng.random(n)[:, None] > cdf).sum(axis=1), n_actions - 1)
    r = (rng.random(n) < env.q[c, a, p]).astype(np.float64)
    return LoggedFeedback(c, a, p, r, env.pi_b[c, p, a], env.pi_e[c, p])
