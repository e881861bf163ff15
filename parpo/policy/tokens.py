"""The native backend's action tokens: one step = ``HEAD`` decision slots + ``max_k`` pointers.

Slots of a step (``T = HEAD + max_k``):

====  ==========  ===========================================================
slot  name        values
====  ==========  ===========================================================
0     tool        0 search, 1 filter, 2 recommend
1     strategy    index into ``parpo.env.schema.STRATEGIES`` (search only)
2     scope       0 the request's category, 1 the whole catalogue (search only)
3     constrain   0 none, 1 the request's constraints (search only)
4..   pointer j   index into the current candidate list (recommend only)
====  ==========  ===========================================================

A slot is a *policy token* (mask 1) only where the policy had a real choice: arguments of a
search when the tool is search, ``scope`` only when the request names a category,
``constrain`` only when it has constraints, and ``min(k, n_candidates)`` pointers of a
recommend. Filters always apply the request's constraints (the only filter the native
policy has a reason to make). Every other slot is 0 and masked.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from parpo.env.observation import Call, Observation
from parpo.env.schema import STRATEGIES, Filter, Recommend, Search

TOOL, STRATEGY, SCOPE, CONSTRAIN, HEAD = 0, 1, 2, 3, 4
SEARCH, FILTER, RECOMMEND = 0, 1, 2
N_TOOLS = 3

#: History tokens: one per kind of past call (``Call.signature``); 0 is padding.
SIGNATURES: tuple[str, ...] = (
    *(f"search:{s}{c}" for s in STRATEGIES for c in ("", "+c")),
    "filter",
    "recommend",
    "invalid",
)
SIGNATURE_CODE = {s: i + 1 for i, s in enumerate(SIGNATURES)}


def history_codes(history: Sequence[Call], width: int) -> np.ndarray:
    """[width] int64: the codes of the past calls (oldest first), 0-padded."""
    out = np.zeros(width, dtype=np.int64)
    codes = [SIGNATURE_CODE[c.signature] for c in history][-width:]
    out[: len(codes)] = codes
    return out


def choice_masks(obs: Observation, max_k: int) -> tuple[np.ndarray, bool, bool, int]:
    """What the policy may choose at ``obs``: tool mask [3] bool, whether ``scope`` and
    ``constrain`` are choices, and the number of pointers a recommend picks."""
    req = obs.task.request
    n_cand = len(obs.candidates)
    tools = np.array([True, obs.searched and not req.constraints.empty, n_cand > 0])
    return tools, req.category is not None, not req.constraints.empty, min(obs.k, n_cand, max_k)


def decode(obs: Observation, tokens: np.ndarray, n_pick: int, search_k: int) -> Search | Filter | Recommend:
    """The typed action a step's tokens [T] stand for (the first ``n_pick`` candidate pointers
    -> external ids for a recommend)."""
    req = obs.task.request
    tool = int(tokens[TOOL])
    if tool == SEARCH:
        return Search(
            category=req.category if tokens[SCOPE] == 0 else None,
            strategy=STRATEGIES[int(tokens[STRATEGY])],
            constraints=req.constraints if tokens[CONSTRAIN] == 1 else type(req.constraints)(),
            attributes=list(req.constraints.attributes),
            k=search_k,
        )
    if tool == FILTER:
        return Filter(constraints=req.constraints)
    ids = obs.candidate_ids
    return Recommend(items=[ids[int(p)] for p in tokens[HEAD : HEAD + n_pick]])
