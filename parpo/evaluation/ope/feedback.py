"""Logged bandit feedback, the one input every off-policy estimator reads.

Slates are handled per slot: each logged row is one (item, position) impression, the
position is part of the context, and the evaluated policy's probabilities are its
per-position marginals pi_e(item | context, position). The estimand is then the
evaluated policy's expected reward per impression, averaged over the logged contexts
and positions (what OBD's on-policy click rate measures).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class LoggedFeedback:
    """n logged rows over A actions.

    context: [n] int, dense context id (the reward model's categorical input).
    action: [n] int in [0, A), the logged item.
    position: [n] int, 0-based slot (0 for single-action logs).
    reward: [n] float, the observed reward (OBD: the click).
    pscore: [n] float in (0, 1], P(logging policy showed ``action`` at ``position`` | context).
    pi_e: [n, A] float, the evaluated policy's pi_e(a | context, position) at each row's
        position, computed once by the caller; rows sum to 1.
    q_hat: [n, A] float or None, out-of-fold estimated rewards q(context, a, position) from
        ``reward_model.cross_fit``; DM and the DR family need it.
    """

    context: np.ndarray
    action: np.ndarray
    position: np.ndarray
    reward: np.ndarray
    pscore: np.ndarray
    pi_e: np.ndarray
    q_hat: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = self.action.shape[0]
        for name in ("context", "position", "reward", "pscore"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} has shape {getattr(self, name).shape}, expected ({n},)")
        if self.pi_e.ndim != 2 or self.pi_e.shape[0] != n:
            raise ValueError(f"pi_e has shape {self.pi_e.shape}, expected ({n}, n_actions)")
        if self.q_hat is not None and self.q_hat.shape != self.pi_e.shape:
            raise ValueError(f"q_hat has shape {self.q_hat.shape}, expected {self.pi_e.shape}")
        if n and not ((self.pscore > 0) & (self.pscore <= 1)).all():
            raise ValueError("pscore must lie in (0, 1]")
        if n and (self.action.min() < 0 or self.action.max() >= self.pi_e.shape[1]):
            raise ValueError(f"action must lie in [0, {self.pi_e.shape[1]})")

    @property
    def n(self) -> int:
        return int(self.action.shape[0])

    @property
    def n_actions(self) -> int:
        return int(self.pi_e.shape[1])

    @property
    def uniform_logs(self) -> bool:
        """One propensity for every row: the logging policy was uniform-random (replay's premise)."""
        return self.n > 0 and float(np.ptp(self.pscore)) <= 1e-9 * float(self.pscore.max())

    @property
    def pi_e_logged(self) -> np.ndarray:
        """[n] pi_e(a_i | x_i, p_i): the evaluated policy's probability of the logged action."""
        return self.pi_e[np.arange(self.n), self.action]

    @property
    def weights(self) -> np.ndarray:
        """[n] importance weights w_i = pi_e(a_i | x_i, p_i) / pi_b(a_i | x_i, p_i)."""
        return self.pi_e_logged / self.pscore

    def with_q_hat(self, q_hat: np.ndarray) -> LoggedFeedback:
        return replace(self, q_hat=q_hat)
