"""A loaded policy version answering micro-batches of ``/v1/act`` requests.

One batch = one ``sample_slates`` over every request's N sampled episodes (greedy requests: one
greedy episode each), grouped by temperature: the policy runs one forward per step for the
distinct plans of all the batch's requests, each plan's environment steps once
(``parpo.policy.plan_tree``); draw 0 of a request is the served one, the N draws give its
propensities (``serving.propensity``). Scores come from one reward-model call
for every served item of the batch. Everything here runs on the model thread only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from parpo.env.cache import BoundedCache
from parpo.env.schema import ACTION_SCHEMA_VERSION, Constraints, Recommend, Request, Search
from parpo.env.tasks import Task
from parpo.policy.agent import PolicyAgent
from parpo.policy.bundle import PolicyBundle
from parpo.policy.slates import SlateDraws
from parpo_core.records import DecisionRecord, SlateEntry
from serving.propensity import position_propensities
from serving.schemas import ActRequest

#: ``explore`` at or below this is greedy serving.
GREEDY = 0.0
#: Agents kept (one per temperature; least recently used evicted): clients choose ``explore`` freely.
AGENT_LIMIT = 32


@dataclass
class Answer:
    """What ``/v1/act`` returns (``response``) and what the decision log stores (``decision``)."""

    response: dict[str, Any]
    decision: DecisionRecord


@dataclass
class LoadedModel:
    bundle: PolicyBundle
    seed: int
    loaded_at: float = field(default_factory=time.time)
    decile: dict[str, int] = field(default_factory=dict)  # item -> popularity decile (0: least popular)
    _agents: BoundedCache[float, PolicyAgent] = field(default_factory=lambda: BoundedCache(AGENT_LIMIT))
    _made: int = 0  # agents created so far

    @classmethod
    def load(cls, registry: str, version: str | None, seed: int) -> LoadedModel:
        bundle = PolicyBundle.load(registry, version)
        c = bundle.catalogue
        rank = np.argsort(np.argsort(c.popularity, kind="stable"), kind="stable")
        decile = dict(zip(c.item_ids, (rank * 10 // max(len(c), 1)).tolist(), strict=True))
        return cls(bundle, seed, decile=decile)

    @property
    def policy_version(self) -> str:
        return self.bundle.version.name

    def _agent(self, temperature: float) -> PolicyAgent:
        # One agent (and one generator) per temperature for as long as it is kept: a fresh seed
        # per batch would repeat the same draws for identical requests, so an agent made again
        # after eviction gets a seed no earlier agent had.
        return self._agents.lookup([temperature], lambda t: [self._new_agent(t[0])])[0]

    def _new_agent(self, temperature: float) -> PolicyAgent:
        self._made += 1
        return self.bundle.agent(temperature, self.seed + self._made - 1)

    def warm(self, n_samples: int, temperature: float) -> None:
        """Run one request through every code path a real one takes (first-call costs paid here)."""
        user = next(iter(self.bundle.reward_model.user_index), "warm-up")
        req = ActRequest(request_id="warm-up", user_id=user)
        self.act([req], n_samples, temperature)
        self.fallback(req, "deadline")

    def act(self, requests: Sequence[ActRequest], n_samples: int, temperature: float) -> list[Answer]:
        """Answer ``requests``; ``temperature`` is the default of those that set no ``explore``."""
        temps = [temperature if r.explore is None else r.explore for r in requests]
        served: list[SlateDraws] = [SlateDraws([], [], [], 0)] * len(requests)
        for tau in sorted(set(temps)):
            idx = [i for i, t in enumerate(temps) if t == tau]
            tasks = [self._task(requests[i]) for i in idx]
            if tau <= GREEDY:
                per_task, env = self.bundle.rollout(self._agent(tau), tasks)
                for j, i in enumerate(idx):
                    plan = [h.action for h in env.episodes[j].history if h.action is not None]
                    served[i] = SlateDraws([per_task["slate"][j].to_list()], [per_task["plan"][j]], plan, 1)
                continue
            for i, d in zip(idx, self.bundle.sample_slates(self._agent(tau), tasks, n_samples), strict=True):
                served[i] = d
        rm = self.bundle.reward_model
        users = [r.user_id for r, d in zip(requests, served, strict=True) for _ in d.slates[0]]
        items = [it for d in served for it in d.slates[0]]
        scores = rm.score(users, items) if items else None
        answers, start = [], 0
        for r, tau, d in zip(requests, temps, served, strict=True):
            slate = d.slates[0]
            if not slate:
                answers.append(self.fallback(r, "no_slate"))
                continue
            props = position_propensities(d.slates, slate)
            sl = slice(start, start + len(slate))
            start += len(slate)
            assert scores is not None
            rows = [
                {
                    "item_id": it,
                    "position": p + 1,
                    "score": float(scores["click"][sl][p]),
                    "interest": float(scores["interest"][sl][p]),
                    "conformity": float(scores["conformity"][sl][p]),
                    "cold": bool(scores["cold"][sl][p]),
                    "propensity": props[p],
                }
                for p, it in enumerate(slate)
            ]
            slot1 = None if d.slot1 is None or d.unexplored is None else (d.slot1, d.slot1 + d.unexplored)
            answers.append(
                self._answer(r, rows, d.served_plan, d.plans[0], max(tau, GREEDY), len(d.slates), tau > GREEDY,
                             None, None, slot1)
            )  # fmt: skip
        return answers

    def fallback(self, r: ActRequest, reason: Literal["deadline", "no_slate"]) -> Answer:
        """The most popular items that satisfy the request (deterministic: propensity 1, not evaluable).

        ``reason``: the request's deadline passed, or the policy's episode ended without a slate.
        """
        c = self.bundle.catalogue
        req = r.request
        category = req.category if req.category in c.category_code else None
        action = Search(
            category=category, strategy="popularity", constraints=req.constraints or Constraints(), k=r.k
        )
        slate = [c.item_ids[i] for i in c.search(action, r.k, c.candidate_mask(r.candidates))]
        scores = self.bundle.reward_model.score([r.user_id] * len(slate), slate)
        rows = [
            {
                "item_id": it,
                "position": p + 1,
                "score": float(scores["click"][p]),
                "interest": float(scores["interest"][p]),
                "conformity": float(scores["conformity"][p]),
                "cold": bool(scores["cold"][p]),
                "propensity": 1.0,
            }
            for p, it in enumerate(slate)
        ]
        plan: list[Any] = [action, Recommend(items=slate)] if slate else [action]
        sig = "search:popularity>recommend" if slate else "search:popularity"
        return self._answer(r, rows, plan, sig, GREEDY, 1, False, "popularity", reason, None)

    def _task(self, r: ActRequest) -> Task:
        req = r.request
        request = Request(category=req.category, constraints=req.constraints or Constraints(), text=req.text)
        return self.bundle.task(r.request_id, r.user_id, request, candidates=r.candidates, k=r.k)

    def _skills(self, r: ActRequest) -> list[dict[str, Any]] | None:
        """The skills the policy's memory showed it for the request (its observation's tokens,
        or its prompt's texts: the same cached retrieval), or None for a policy without memory.
        Serving never writes the memory."""
        shown = self.bundle.policy.shown_skills([self._task(r)])
        return None if shown is None else shown[0]

    def _answer(
        self,
        r: ActRequest,
        rows: list[dict[str, Any]],
        plan: list[Any],
        signature: str,
        explore: float,
        n: int,
        evaluable: bool,
        fallback: str | None,
        reason: str | None,
        slot1: tuple[float, float] | None,
    ) -> Answer:
        cat = self.bundle.catalogue.row
        unknown = [i for i in r.candidates if i not in cat] if r.candidates is not None else []
        cold_user = r.user_id not in self.bundle.reward_model.user_index
        response = {
            "request_id": r.request_id,
            "policy_version": self.policy_version,
            "reward_version": self.bundle.reward_version,
            "action_schema_version": ACTION_SCHEMA_VERSION,
            "plan": plan,
            "slate": rows,
            "evaluable": evaluable,
            "explore": explore,
            "n_samples": n,
            "cold_user": cold_user,
            "unknown_candidates": unknown,
            "fallback": fallback,
            "fallback_reason": reason,
            "slot1_propensity": None if slot1 is None else {"low": slot1[0], "high": slot1[1]},
            "skills": self._skills(r),
        }
        decision = DecisionRecord(
            ts=time.time(),
            request_id=r.request_id,
            user_id=r.user_id,
            request=r.request.model_dump(mode="json"),
            context=r.context,
            candidates=r.candidates,
            k=r.k,
            policy_version=self.policy_version,
            reward_version=self.bundle.reward_version,
            explore=explore,
            n_samples=n,
            evaluable=evaluable,
            fallback=fallback,
            plan=signature,
            cold_user=cold_user,
            slot1_low=None if slot1 is None else slot1[0],
            slot1_high=None if slot1 is None else slot1[1],
            slate=[
                SlateEntry(item_id=x["item_id"], position=x["position"], propensity=x["propensity"])
                for x in rows
            ],
        )
        return Answer(response, decision)
