"""Reference agents: random, popularity, the best single fixed plan, greedy reward model, and
(where the truth is known) ``oracle_true``.

Every agent is batched: ``act(observations) -> actions`` (one per observation). They are the
bar a learned policy must clear; ``greedy_reward`` is an oracle-like reference (it ranks the
whole category by the reward model's interest score); ``oracle_true`` ranks it by the true
interest instead, the ceiling of true preference any agent can reach on the same requests.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from parpo.env.environment import TrueInterest
from parpo.env.observation import Observation
from parpo.env.reward_model import RewardModel
from parpo.env.schema import STRATEGIES, Constraints, Filter, Recommend, Search


class Agent(Protocol):
    name: str

    def act(self, observations: Sequence[Observation]) -> list[Search | Filter | Recommend]: ...


def _search(obs: Observation, strategy: str, constraints: bool, k: int) -> Search:
    r = obs.task.request
    return Search(
        category=r.category,
        strategy=strategy,
        constraints=r.constraints if constraints else Constraints(),
        attributes=r.constraints.attributes,
        k=k,
    )


def _recommend(obs: Observation, rows: np.ndarray) -> Recommend:
    """Recommend ``rows``; with no candidates at all, the catalogue's most popular item (a
    slate-less episode would score 0 on every slate-based component)."""
    c = obs.catalogue
    if rows.size == 0:
        rows = np.array([int(np.argmax(c.popularity))])
    return Recommend(items=[c.item_ids[r] for r in rows[: obs.k]])


def _relax_or_recommend(obs: Observation, rows: np.ndarray) -> Search | Recommend:
    """An empty candidate list with steps to spare: search the category without constraints."""
    relaxed = any(isinstance(h.action, Search) and h.action.constraints.empty for h in obs.history)
    if rows.size == 0 and not relaxed and obs.step + 1 < obs.max_steps:
        return Search(category=obs.task.request.category, strategy="popularity", k=obs.k)
    return _recommend(obs, rows)


@dataclass
class RandomAgent:
    """Search the requested category under the request's constraints with a random strategy
    (``search_k`` candidates), then recommend K of them drawn uniformly."""

    search_k: int = 50
    seed: int = 0
    name: str = "random"

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def act(self, observations: Sequence[Observation]) -> list[Search | Filter | Recommend]:
        out: list[Search | Filter | Recommend] = []
        for obs in observations:
            if not obs.searched:
                out.append(_search(obs, str(self.rng.choice(STRATEGIES)), True, self.search_k))
            else:
                rows = obs.candidates
                pick = self.rng.permutation(rows.size)[: obs.k]
                out.append(_relax_or_recommend(obs, rows[np.sort(pick)] if rows.size else rows))
        return out


@dataclass(frozen=True)
class Plan:
    """A fixed plan: ``search(strategy)`` with the request's constraints in the search
    (``constraints="search"``), in a following ``filter`` (``"filter"``: the search then returns
    ``search_k`` items), or not at all (``"none"``); then recommend the first K."""

    strategy: str
    constraints: Literal["search", "filter", "none"]

    @property
    def label(self) -> str:
        return f"{self.strategy}/{self.constraints}"


PLANS: tuple[Plan, ...] = tuple(
    Plan(s, c) for s, c in itertools.product(STRATEGIES, ("search", "filter", "none"))
)


@dataclass
class PlanAgent:
    plan: Plan
    search_k: int = 50
    name: str = "fixed_plan"

    def act(self, observations: Sequence[Observation]) -> list[Search | Filter | Recommend]:
        p, out = self.plan, []
        for obs in observations:
            calls = [h.action for h in obs.history]
            if not calls:
                k = self.search_k if p.constraints == "filter" else obs.k
                out.append(_search(obs, p.strategy, p.constraints == "search", k))
            elif p.constraints == "filter" and len(calls) == 1 and not obs.task.request.constraints.empty:
                out.append(Filter(constraints=obs.task.request.constraints))
            else:
                out.append(_relax_or_recommend(obs, obs.candidates))
        return out


def popularity_agent() -> PlanAgent:
    """The most popular K items of the requested category under the request's constraints."""
    return PlanAgent(Plan("popularity", "search"), name="popularity")


@dataclass
class GreedyRewardAgent:
    """Oracle-like reference: rank every item of the requested category that meets the request
    by the reward model's interest score for the user (cold users through their profile) and
    recommend the top K in one step, without searching. Falls back to the whole category, then
    the whole catalogue, when nothing meets the request."""

    reward_model: RewardModel | TrueScores
    name: str = "greedy_reward"
    oracle: bool = True
    #: (user, item) pairs scored per reward-model call: an open request's pool is the whole
    #: catalogue, so a batch of them would otherwise gather tasks x items vectors at once.
    max_pairs: int = 1 << 21

    def act(self, observations: Sequence[Observation]) -> list[Search | Filter | Recommend]:
        pools = [_pool(obs) for obs in observations]
        out: list[Search | Filter | Recommend] = []
        start, pairs = 0, 0
        for j, pool in enumerate(pools):
            if pairs and pairs + pool.size > self.max_pairs:
                out += self._rank(observations[start:j], pools[start:j])
                start, pairs = j, 0
            pairs += pool.size
        return out + self._rank(observations[start:], pools[start:])

    def _rank(self, observations: Sequence[Observation], pools: Sequence[np.ndarray]) -> list[Recommend]:
        """Top K of each pool by interest, in one reward-model call."""
        users, items, profiles = [], [], {}
        for obs, pool in zip(observations, pools, strict=True):
            c = obs.catalogue
            users += [obs.task.user_id] * pool.size
            items += [c.item_ids[i] for i in pool]
            if obs.task.profile is not None:
                profiles[obs.task.user_id] = list(obs.task.profile)
        if not users:
            return []
        interest = self.reward_model.score(users, items, profiles or None)["interest"]
        out = []
        start = 0
        for obs, pool in zip(observations, pools, strict=True):
            s = interest[start : start + pool.size]
            start += pool.size
            order = np.lexsort((pool, -s))[: obs.k]  # best interest first, ties by row
            out.append(_recommend(obs, pool[order]))
        return out


@dataclass(frozen=True)
class TrueScores:
    """The truth in the reward model's place for ``GreedyRewardAgent``: ``score`` returns the
    true interest of each pair (``data_pipelines.synth.Truth.interest``)."""

    true_interest: TrueInterest

    def score(
        self, user_ids: Sequence[str], item_ids: Sequence[str], profiles: Any = None
    ) -> dict[str, np.ndarray]:
        """``{"interest": [N] float64}`` of the pairs (user_ids[k], item_ids[k]); profiles unused."""
        return {"interest": np.asarray(self.true_interest(user_ids, item_ids), dtype=np.float64)}


def oracle_true_agent(true_interest: TrueInterest) -> GreedyRewardAgent:
    """``greedy_reward`` with the true interest as its score (synthetic data)."""
    return GreedyRewardAgent(TrueScores(true_interest), name="oracle_true")


def _pool(obs: Observation) -> np.ndarray:
    """Catalogue rows meeting the request; else the category's; else the whole catalogue."""
    c, r = obs.catalogue, obs.task.request
    pool = np.flatnonzero(c.mask(r.category, r.constraints))
    if pool.size == 0:
        pool = np.flatnonzero(c.mask(r.category, Constraints()))
    if pool.size == 0:
        pool = np.arange(len(c))
    return pool
