"""An LLM's text -> the env's typed action, or the text itself for the env's invalid-call path.

The first JSON object in the text is the call (prose before or after it is ignored: small
models add it). A ``recommend``'s short ids (``c3``) become the item ids of the latest result;
an id that is neither stays as written, and the env counts it as an unknown item. Text with no
JSON object or a truncated one is returned as it is, an object with an unknown tool or a bad
argument as its JSON: the env parses it again and records an invalid call with the reason (``task/valid_calls``), so no
error of the model ever raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from parpo.env.schema import ActionError, Filter, Recommend, Search, parse_action

_SHORT = re.compile(r"c([1-9][0-9]*)")
_DECODER = json.JSONDecoder()


def first_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (None when no ``{`` starts a complete one)."""
    start = text.find("{")
    while start >= 0:
        try:
            obj, _ = _DECODER.raw_decode(text, start)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            return obj
        start = text.find("{", start + 1)
    return None


def resolve_ids(items: Any, candidate_ids: Sequence[str]) -> Any:
    """Short ids ``c<n>`` (1-based into ``candidate_ids``) -> item ids; other values unchanged."""
    if not isinstance(items, list):
        return items
    out = []
    for it in items:
        m = _SHORT.fullmatch(it) if isinstance(it, str) else None
        n = int(m.group(1)) if m else 0
        out.append(candidate_ids[n - 1] if 0 < n <= len(candidate_ids) else it)
    return out


def parse_call(text: str, candidate_ids: Sequence[str]) -> Search | Filter | Recommend | str:
    """The typed action ``text`` calls for; otherwise a string for the env's invalid-call path:
    ``text`` when it holds no JSON object, else the object's JSON (so the env names the bad field)."""
    obj = first_object(text)
    if obj is None:
        return text
    if obj.get("tool") == "recommend" and "items" in obj:
        obj = {**obj, "items": resolve_ids(obj["items"], candidate_ids)}
    try:
        return parse_action(obj)
    except ActionError:
        return json.dumps(obj)  # the env records the reason (the field), not the prose around it
