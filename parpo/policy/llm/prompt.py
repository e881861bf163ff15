"""The text of an LLM agent's conversation: system (rules + the action JSON Schema), user (profile
summary + request, and with a memory the retrieved skills' texts) and one tool message per call
that did not end the episode.

Candidates are named by short ids (``c1`` is the best-ranked of the latest result); a recommend
may use them (``parse.parse_call`` maps them back to item ids). Messages are plain role/content
mappings for the tokenizer's chat template. Everything here is pure text; ``conversation``
turns it into tokens and cuts tool results to the context.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from parpo.env.observation import Observation
from parpo.env.schema import action_json_schema
from parpo.policy.llm.profile import Profile

TOOL_ROLE = "tool"

RULES = (
    "You are a shopping agent. Find items that satisfy the user's request and that this user, "
    "not the crowd, likes. Each turn, answer with exactly one JSON object, a tool call that follows "
    "this JSON Schema, and nothing else:\n{schema}\n"
    "search replaces the candidate list, filter narrows it, recommend ends the task with the "
    "slate (best first). Candidates are named by short ids (c1 is the best-ranked of the latest "
    "result); recommend them by those ids."
)
#: Appended to ``RULES`` when tool results carry the reward model's view of each candidate.
PERSONAL_RULES = (
    " Each candidate also carries the preference model's view of it for this user: interest_pct "
    "(its percentile of the user's predicted interest among all items, 1 is the highest), "
    "interest_z and conformity_z (z-scores of the predicted interest and of the item's appeal to "
    "the crowd), scored (false: the model knows nothing of the item and the values are neutral)."
)

#: Appended to ``RULES`` when the first message may list skills from the memory.
MEMORY_RULES = (
    " The task may list skills: plans that served similar requests and users well before (the "
    "scenario, the calls in order, their arguments and the slate size), best first; follow one "
    "when it fits."
)


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def short_id(rank: int) -> str:
    """The short id of the candidate at 0-based ``rank`` in the latest result: ``c1``, ``c2``, ..."""
    return f"c{rank + 1}"


def system_message(personal: bool, memory: bool = False) -> dict[str, str]:
    """The rules and the schema; ``personal``: tool results carry the reward model's view;
    ``memory``: the task may list skills."""
    rules = RULES.format(schema=_dumps(action_json_schema()))
    return {
        "role": "system",
        "content": rules + (PERSONAL_RULES if personal else "") + (MEMORY_RULES if memory else ""),
    }


def user_message(obs: Observation, profile: Profile, skills: Sequence[str] = ()) -> dict[str, str]:
    """The task: who asks (profile summary), what (request), how many items and calls, and the
    texts of the ``skills`` the memory retrieved for it (the key only when there are some)."""
    data: dict[str, Any] = {
        "profile": profile.to_json(),
        "request": obs.task.request.model_dump(mode="json", exclude_none=True),
        "slate_size": obs.k,
        "max_calls": obs.max_steps,
    }
    if skills:
        data["skills"] = list(skills)
    return {"role": "user", "content": _dumps(data)}


def tool_result(obs: Observation, shown: int, personal: np.ndarray | None = None) -> dict[str, Any]:
    """The result of ``obs``'s latest call as JSON data, with the ``shown`` best candidates
    (with the reward model's view of each given the user's ``personal`` table [n_items, 4]).

    ``truncated``: candidates of the list left out to fit the context (beyond ``shown``)."""
    last = obs.history[-1]
    left = obs.max_steps - obs.step
    if not last.valid:
        return {"ok": False, "error": last.error, "calls_left": left}
    cands = obs.to_json(personal)["candidates"]
    rows = [
        {"id": short_id(r), **{k: v for k, v in c.items() if k != "item_id"}} for r, c in enumerate(cands)
    ]
    return {"ok": True, "calls_left": left, "total": len(rows), "truncated": max(len(rows) - shown, 0),
            "candidates": rows[:shown]}  # fmt: skip


def tool_message(obs: Observation, shown: int, personal: np.ndarray | None = None) -> dict[str, str]:
    return {"role": TOOL_ROLE, "content": _dumps(tool_result(obs, shown, personal))}


def assistant_message(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}
