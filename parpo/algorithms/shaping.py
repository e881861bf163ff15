"""Reward shaping: penalties for over-long episodes and invalid tool calls, each clipped.

The penalties are reward components (``task/overlong``, ``task/invalid_call``), so they join the
advantage like any other component: summed or normalised in their group by ``ADVANTAGES``, or put
on an episode's last action token (``outcome_rewards``) for the value-based estimators. Each is
clipped to ``cfg.clip`` (default ``[-0.25, 0.25]``) first, so shaping can never outweigh a task
reward in ``[0, 1]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import Tensor

if TYPE_CHECKING:  # annotations only: the config module imports this one for the component names
    from parpo.algorithms.config import ShapingConfig

OVERLONG = "task/overlong"
INVALID_CALL = "task/invalid_call"


def shaping_rewards(length: Tensor, invalid_calls: Tensor, cfg: ShapingConfig) -> dict[str, Tensor]:
    """``length``, ``invalid_calls``: ``[B]`` per episode; returns the clipped penalties ``[B]`` by name.

    With ``L0 = max_len - len_buffer`` (DAPO's soft over-long ramp, scaled)::

        overlong = clip(-overlong_coef * max(0, length - L0) / len_buffer, low, high)
        invalid  = clip(-invalid_coef * invalid_calls, low, high)

    ``overlong`` is left out when ``cfg.max_len`` is None.
    """
    if length.shape != invalid_calls.shape or length.ndim != 1:
        raise ValueError(
            f"length {tuple(length.shape)} and invalid_calls {tuple(invalid_calls.shape)} must be equal [B]"
        )
    low, high = cfg.clip
    out = {INVALID_CALL: (-cfg.invalid_coef * invalid_calls.float()).clamp(low, high)}
    if cfg.max_len is not None:
        over = (length.float() - (cfg.max_len - cfg.len_buffer)).clamp_min(0) / cfg.len_buffer
        out[OVERLONG] = (-cfg.overlong_coef * over).clamp(low, high)
    return out
