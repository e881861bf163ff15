"""The decision log: every slate the server answers, as one record in ``EVENTS/decisions/``.

A record is a ``parpo_core.records.DecisionRecord`` (one JSON line; the ``parpo-events``
adapter reads it back):

    {"kind": "decision", "schema_version": 1, "ts": 1764500000.12, "request_id": "r1",
     "user_id": "u7", "request": {...}, "context": {...} | null, "candidates": [...] | null,
     "k": 10, "policy_version": "v000002-...", "reward_version": "v000001-...",
     "explore": 1.0, "n_samples": 64, "evaluable": true, "fallback": null, "plan": "search:...",
     "cold_user": false, "slate": [{"item_id": "i3", "position": 1, "propensity": 0.42}, ...]}

Under ``decisions.on_failure: serve`` (the default) ``/v1/act`` queues the record and answers
without waiting for its fsync; while the log cannot be written it does not queue it and
answers ``logged: false``. Under ``reject`` it awaits the fsync and answers 503 when it fails.
The in-memory index (request id -> served items, bounded) lets the event log flag events that
name an unknown request or an item the decision did not put at that position; a decision
whose write failed leaves it again.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from parpo_core.records import DecisionRecord
from serving.config import LogConfig
from serving.segments import SegmentLog, read_records


class DecisionLog:
    def __init__(
        self, root: str | Path, cfg: LogConfig, on_failure: Callable[[int, OSError], None] | None = None
    ) -> None:
        folder = Path(root) / "decisions"
        self.limit = cfg.index_limit
        self.served: OrderedDict[str, list[str]] = OrderedDict()
        for rec in read_records(folder):
            self._remember(rec["request_id"], [s["item_id"] for s in rec["slate"]])
        self.log = SegmentLog(folder, commit_interval_ms=cfg.commit_interval_ms, segment_bytes=cfg.segment_bytes,
                              probe_s=cfg.probe_s, on_failure=on_failure)  # fmt: skip

    def _remember(self, request_id: str, items: list[str]) -> None:
        self.served[request_id] = items
        self.served.move_to_end(request_id)
        if len(self.served) > self.limit:
            self.served.popitem(last=False)

    def record(self, decision: DecisionRecord) -> asyncio.Future[None]:
        """Index ``decision`` and queue it for the next group commit; the future resolves after
        its fsync (awaiting it is optional: a failure is counted by the log either way)."""
        items = [s.item_id for s in decision.slate]
        self._remember(decision.request_id, items)
        fut = self.log.append([decision.to_json()])
        fut.add_done_callback(lambda f: self._settled(f, decision.request_id, items))
        return fut

    def _settled(self, fut: asyncio.Future[None], request_id: str, items: list[str]) -> None:
        if fut.cancelled() or fut.exception() is None:
            return
        if self.served.get(request_id) is items:  # not stored: events must not find it
            del self.served[request_id]

    def close(self) -> None:
        self.log.close()
