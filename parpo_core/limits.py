"""Bounds shared by the server's API and the ingest, so nothing one accepts the other rejects.

An event the server acknowledges is later ingested from its log: its timestamp, ids and
numbers must pass the ingest's checks too. Both sides read these constants; changing the id
rule bumps ``ID_RULE_VERSION`` (datasets record the rule they were ingested under).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

#: Timestamps before this are treated as corrupt (Unix 0, a year typed as 19xx...).
TS_MIN = datetime(1990, 1, 1, tzinfo=UTC)
#: Tolerance for clock skew past the time of ingest (or of the server's receipt).
TS_FUTURE_SLACK = timedelta(days=1)

#: Longest user, item or request id, in characters.
ID_MAX_CHARS = 256
#: The id rule: 1..ID_MAX_CHARS characters, no control characters (NUL included), and no
#: white space at either end (the ingest trims it and counts ``ids_trimmed``; the API refuses it).
ID_RULE_VERSION = 1
#: Characters no id may hold: C0 controls (NUL included), DEL and C1 controls.
ID_FORBIDDEN = r"[\x00-\x1f\x7f-\x9f]"
_FORBIDDEN = re.compile(ID_FORBIDDEN)

#: Largest price a request may name (a bound keeps every price finite in the featurizer).
PRICE_MAX = 1e12
#: Largest magnitude of an event's ``value`` (a purchase amount, a rating...).
VALUE_MAX = 1e12


def ts_bounds(now: datetime | None = None) -> tuple[datetime, datetime]:
    """[TS_MIN, now + TS_FUTURE_SLACK]: the timestamps an event may carry."""
    return TS_MIN, (now or datetime.now(UTC)) + TS_FUTURE_SLACK


def id_problem(value: str) -> str | None:
    """Why ``value`` is not a valid id under the current rule (None: it is valid)."""
    if not value:
        return "is empty"
    if len(value) > ID_MAX_CHARS:
        return f"is longer than {ID_MAX_CHARS} characters ({len(value)})"
    bad = _FORBIDDEN.search(value)
    if bad is not None:
        return f"holds the control character U+{ord(bad.group()):04X} at {bad.start()}"
    if value != value.strip():
        return "starts or ends with white space"
    return None
