"""The event log: user feedback on served slates, one record per accepted event, in ``EVENTS/events/``.

A record is a ``parpo_core.records.EventRecord`` (one JSON line; the ``parpo-events`` adapter
reads it back):

    {"kind": "event", "schema_version": 1, "received": 1764500001.5, "request_id": "r1",
     "position": 1, "event": "click", "item_id": "i3", "user_id": "u7", "ts": 1764500001.2,
     "value": null, "event_id": "e-9", "logged_item_id": "i3",
     "duplicate": false, "unknown_request": false, "item_mismatch": false}

``logged_item_id`` is the item the decision put at that position (null when the request is
unknown). Nothing is dropped: a second (request_id, position, event) is stored with
``duplicate: true``; an unknown request id or an ``item_id`` that disagrees with the decision
is stored and flagged. A repeated ``event_id`` is idempotent: it is not stored again and
gets the first answer. ``submit`` returns only after the records are fsynced.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from pathlib import Path

from parpo_core.records import EventRecord
from serving.config import LogConfig
from serving.decisions import DecisionLog
from serving.schemas import Event, EventResult
from serving.segments import SegmentLog, read_records


class EventLog:
    def __init__(self, root: str | Path, cfg: LogConfig, decisions: DecisionLog) -> None:
        folder = Path(root) / "events"
        self.limit = cfg.index_limit
        self.decisions = decisions
        self.seen: set[tuple[str, int, str]] = set()
        # event_id -> (first answer, its commit): a repeat waits for the same fsync.
        self.ids: OrderedDict[str, tuple[EventResult, asyncio.Future[None] | None]] = OrderedDict()
        self.stored = 0
        for rec in read_records(folder):
            self.seen.add((rec["request_id"], rec["position"], rec["event"]))
            if rec.get("event_id"):
                self._remember(rec["event_id"], _result(EventRecord.model_validate(rec), stored=True), None)
        self.log = SegmentLog(
            folder, commit_interval_ms=cfg.commit_interval_ms, segment_bytes=cfg.segment_bytes
        )

    def _remember(self, event_id: str, result: EventResult, fut: asyncio.Future[None] | None) -> None:
        self.ids[event_id] = (result, fut)
        if len(self.ids) > self.limit:
            self.ids.popitem(last=False)

    async def submit(self, events: list[Event]) -> list[EventResult]:
        """Flag, store and fsync ``events``; the answer per event in input order."""
        results: list[EventResult] = []
        waits: list[asyncio.Future[None]] = []
        new_ids: list[str] = []
        now = time.time()
        for e in events:
            if e.event_id is not None and e.event_id in self.ids:
                first, fut = self.ids[e.event_id]
                results.append(first.model_copy(update={"stored": False}))
                if fut is not None:
                    waits.append(fut)
                continue
            served = self.decisions.served.get(e.request_id)
            logged = served[e.position - 1] if served is not None and e.position <= len(served) else None
            key = (e.request_id, e.position, e.event)
            rec = EventRecord(
                received=now,
                **e.model_dump(),
                logged_item_id=logged,
                duplicate=key in self.seen,
                unknown_request=served is None,
                item_mismatch=e.item_id is not None and logged is not None and e.item_id != logged,
            )
            self.seen.add(key)
            fut = self.log.append(rec.to_json())
            waits.append(fut)
            result = _result(rec, stored=True)
            if e.event_id is not None:
                self._remember(e.event_id, result, fut)
                new_ids.append(e.event_id)
            results.append(result)
        try:
            await asyncio.gather(*waits)
        except OSError:
            for i in new_ids:  # not stored: a retry of these ids must store them
                self.ids.pop(i, None)
            raise
        self.stored += sum(r.stored for r in results)
        return results

    def close(self) -> None:
        self.log.close()


def _result(rec: EventRecord, *, stored: bool) -> EventResult:
    return EventResult(
        event_id=rec.event_id,
        stored=stored,
        duplicate=rec.duplicate,
        unknown_request=rec.unknown_request,
        item_mismatch=rec.item_mismatch,
    )
