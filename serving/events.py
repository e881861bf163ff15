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
gets the first answer.

The invariant is *a 2xx if and only if durably stored, exactly once*: ``submit`` writes a
batch as one unit (all of it or none), returns only after its fsync, and raises the
``OSError`` (the route's 503) when the write failed. The dedupe state (keys seen, event ids
stored) takes a batch's keys only once its write succeeded; an event whose key or id is in a
batch still being written waits for that batch's outcome before it is flagged, so a failed
write never makes a later event a "duplicate" of something that was not stored.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from parpo_core.records import EventRecord
from serving.config import LogConfig
from serving.decisions import DecisionLog
from serving.schemas import Event, EventResult
from serving.segments import SegmentLog, read_records

Key = tuple[str, int, str]


class EventLog:
    def __init__(self, root: str | Path, cfg: LogConfig, decisions: DecisionLog,
                 on_failure: Callable[[int, OSError], None] | None = None) -> None:  # fmt: skip
        folder = Path(root) / "events"
        self.limit = cfg.index_limit
        self.decisions = decisions
        self.seen: set[Key] = set()
        self.ids: OrderedDict[str, EventResult] = OrderedDict()  # event_id -> its first answer
        self._pending_keys: dict[Key, asyncio.Future[None]] = {}
        self._pending_ids: dict[str, asyncio.Future[None]] = {}
        for rec in read_records(folder):
            self.seen.add((rec["request_id"], rec["position"], rec["event"]))
            if rec.get("event_id"):
                self._remember(rec["event_id"], _result(EventRecord.model_validate(rec), stored=True))
        self.log = SegmentLog(folder, commit_interval_ms=cfg.commit_interval_ms, segment_bytes=cfg.segment_bytes,
                              probe_s=cfg.probe_s, on_failure=on_failure)  # fmt: skip

    def _remember(self, event_id: str, result: EventResult) -> None:
        self.ids[event_id] = result
        if len(self.ids) > self.limit:
            self.ids.popitem(last=False)

    def _in_flight(self, events: list[Event]) -> set[asyncio.Future[None]]:
        """Writes still pending that share a key or an event id with ``events``."""
        out = set()
        for e in events:
            for fut in (self._pending_keys.get((e.request_id, e.position, e.event)),
                        self._pending_ids.get(e.event_id) if e.event_id is not None else None):  # fmt: skip
                if fut is not None:
                    out.add(fut)
        return out

    async def submit(self, events: list[Event]) -> list[EventResult]:
        """Flag, store and fsync ``events`` (all or none); the answer per event in input order."""
        while waits := self._in_flight(events):
            await asyncio.gather(*waits, return_exceptions=True)
        # From here to append nothing awaits: the flags are decided on what is stored now.
        results: list[EventResult] = []
        records: list[dict[str, object]] = []
        keys: set[Key] = set()
        ids: dict[str, EventResult] = {}
        now = time.time()
        for e in events:
            first = (self.ids.get(e.event_id) or ids.get(e.event_id)) if e.event_id is not None else None
            if first is not None:
                results.append(first.model_copy(update={"stored": False}))
                continue
            served = self.decisions.served.get(e.request_id)
            logged = served[e.position - 1] if served is not None and e.position <= len(served) else None
            key = (e.request_id, e.position, e.event)
            rec = EventRecord(
                received=now,
                **e.model_dump(),
                logged_item_id=logged,
                duplicate=key in self.seen or key in keys,
                unknown_request=served is None,
                item_mismatch=e.item_id is not None and logged is not None and e.item_id != logged,
            )
            keys.add(key)
            result = _result(rec, stored=True)
            if e.event_id is not None:
                ids[e.event_id] = result
            records.append(rec.to_json())
            results.append(result)
        if not records:
            return results
        fut = self.log.append(records)
        self._pending_keys.update(dict.fromkeys(keys, fut))
        self._pending_ids.update(dict.fromkeys(ids, fut))
        # The state follows the write's outcome even if this request's task is cancelled.
        fut.add_done_callback(lambda f: self._settled(f, keys, ids))
        await asyncio.shield(fut)
        return results

    def _settled(self, fut: asyncio.Future[None], keys: set[Key], ids: dict[str, EventResult]) -> None:
        for k in keys:
            if self._pending_keys.get(k) is fut:
                del self._pending_keys[k]
        for i in ids:
            if self._pending_ids.get(i) is fut:
                del self._pending_ids[i]
        if fut.cancelled() or fut.exception() is not None:
            return
        self.seen |= keys
        for i, r in ids.items():
            self._remember(i, r)

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
