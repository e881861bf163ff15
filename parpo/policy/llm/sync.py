"""The check after every weight sync: the engine's log-probs of a fixed probe sequence (one row per
replica of the weights: the engine, or each rollout worker) against the trainer's, within
``rollout.probe_tolerance``. A replica that is off stops the run with one line naming it and
the gap: rollouts from stale or half-loaded weights would train on the wrong behaviour policy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from parpo.policy.llm.conversation import ChatFormat
from parpo.policy.llm.engine import probe_logprobs
from parpo.policy.llm.prompt import assistant_message
from parpo_core.errors import UserError

#: A request and a call in the chat format: prompt, role and JSON tokens, as rollouts have them.
PROBE_MESSAGES = [
    {"role": "user", "content": "I need running shoes under 80, in red if there are any."},
    assistant_message('{"tool": "search", "category": "shoes", "strategy": "popularity", "k": 10}'),
]


class EngineSyncError(UserError):
    """A rollout engine or worker that did not load the new weights: timed out, died, or scores
    the probe differently from the trainer."""


def probe_ids(chat: ChatFormat) -> list[int]:
    """The probe sequence's tokens (``PROBE_MESSAGES`` through the chat template)."""
    return chat.encode(chat.text(PROBE_MESSAGES, False))


def probe_gaps(trainer: Sequence[float], replicas: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Per replica, max |replica - trainer| over the probe's tokens ([L - 1] each)."""
    out = {}
    for name, logp in replicas.items():
        if len(logp) != len(trainer):
            raise EngineSyncError(f"{name}: scored {len(logp)} probe tokens, the trainer {len(trainer)}")
        out[name] = max((abs(a - b) for a, b in zip(logp, trainer, strict=True)), default=0.0)
    return out


def check_gaps(gaps: Mapping[str, float], tolerance: float) -> None:
    """One line naming the first replica whose gap exceeds ``tolerance`` (nan counts as over)."""
    for name, gap in gaps.items():
        if not gap <= tolerance:
            raise EngineSyncError(
                f"{name}: log-probs of the probe sequence differ from the trainer's by {gap:.3g} after the "
                f"weight sync (rollout.probe_tolerance {tolerance:g})"
            )


def sync_engine(engine: Any, model: Any, chat: ChatFormat, tolerance: float) -> dict[str, float]:
    """Load ``model``'s weights into ``engine`` (``RolloutEngine.sync``), then check every
    replica's probe log-probs against ``model``'s. Returns ``llm/sync_probe_gap`` (the largest
    gap) and ``time/sync_s``."""
    t0 = time.perf_counter()
    engine.sync(model)
    ids = probe_ids(chat)
    gaps = probe_gaps(probe_logprobs(model, ids), engine.score(ids))
    check_gaps(gaps, tolerance)
    return {"llm/sync_probe_gap": max(gaps.values(), default=0.0), "time/sync_s": time.perf_counter() - t0}
