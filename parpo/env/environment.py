"""The agent environment: ``reset(task) -> observation``, ``step(action) -> observation,
reward components, terminated, truncated, info``; ``BatchEnv`` runs many episodes at once.

Rules (docs/env.md has the formulas):

- ``search`` replaces the candidate list (at most ``search_k`` items, restricted to the task's
  ``candidates`` when it has them); ``filter`` narrows it; ``recommend`` ends the episode
  (``terminated``). After ``max_steps`` calls without a recommend the episode is ``truncated``.
- Invalid calls are recorded, never raised: an action that does not parse, a search of an
  unknown category, a filter before any search. Unknown items (not in the catalogue or not among
  the task's candidates) and duplicates are dropped from the slate and counted against
  ``task/items_valid``.
- Rewards are episodic: every component is 0 until the step that ends the episode, then
  ``task/constraints``, ``task/items_valid``, ``task/valid_calls``, ``task/efficiency`` and
  ``preference`` (the reward model's ``preference_reward`` of the slate; cold users through
  their profile; optionally transformed per user, ``PreferenceTransform``). An episode without
  a slate scores 0 on every slate-based component. ``info`` carries what is reported but never
  trained on: hit@10, ndcg@10 against the task's target, and ``true_preference`` (synthetic).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from data_pipelines.metrics import per_user_ranking_metrics
from parpo.env.cache import BoundedCache
from parpo.env.catalogue import Catalogue, RequestView
from parpo.env.config import TASK_COMPONENTS, EnvConfig
from parpo.env.observation import Call, Observation
from parpo.env.reward_model import PreferenceModel
from parpo.env.schema import ActionError, Filter, Recommend, Search, parse_action
from parpo.env.tasks import Task

COMPONENTS: tuple[str, ...] = (*(f"task/{c}" for c in TASK_COMPONENTS), "preference")
#: Cached (user, profile, slate) preference rewards; the least recently used are evicted past this.
CACHE_LIMIT = 200_000
RawAction = Search | Filter | Recommend | dict[str, Any] | str | bytes


#: ``(user_ids [B], preference [B]) -> preference [B]``: per-user transforms of the preference
#: reward (issue 7: scale by a_u, add noise, shift the level) without touching the core.
PreferenceTransform = Callable[[Sequence[str], np.ndarray], np.ndarray]
#: ``(user_ids [N], item_ids [N]) -> true interest [N]`` (``data_pipelines.synth.Truth.interest``).
TrueInterest = Callable[[Sequence[str], Sequence[str]], np.ndarray]


@dataclass
class _Episode:
    task: Task
    k: int
    view: RequestView  # the request's mask and feature columns
    allowed: np.ndarray | None  # [n_items] bool: the task's candidate list, if any
    feasible: int  # items that satisfy the request (among the allowed ones)
    candidates: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    history: list[Call] = field(default_factory=list)
    surfaced: set[int] = field(default_factory=set)
    done: bool = False


class BatchEnv:
    """Many episodes stepped together; rewards of the episodes that end in a step are computed
    in one reward-model call (and cached per user and slate)."""

    def __init__(
        self,
        catalogue: Catalogue,
        reward_model: PreferenceModel,
        cfg: EnvConfig | None = None,
        *,
        true_interest: TrueInterest | None = None,
        preference_transform: PreferenceTransform | None = None,
    ) -> None:
        self.catalogue, self.reward_model = catalogue, reward_model
        self.cfg = cfg or EnvConfig()
        self.true_interest = true_interest
        self.preference_transform = preference_transform
        self.episodes: list[_Episode] = []
        self._obs: list[Observation] = []
        self._pref_cache: BoundedCache[tuple[str, tuple[str, ...] | None, tuple[str, ...]], float] = (
            BoundedCache(CACHE_LIMIT)
        )

    def __len__(self) -> int:
        return len(self.episodes)

    # -- reset -------------------------------------------------------------------------
    def reset(self, tasks: Sequence[Task]) -> list[Observation]:
        c = self.catalogue
        self.episodes = []
        for t in tasks:
            allowed = c.candidate_mask(t.candidates)
            view = c.request_view(t.request.category, t.request.constraints)
            sat = view.satisfies
            feasible = int((sat & allowed).sum() if allowed is not None else sat.sum())
            self.episodes.append(_Episode(t, t.k or self.cfg.k, view, allowed, feasible))
        self._obs = [self._observe(e) for e in self.episodes]
        return list(self._obs)

    def branch(self, parents: Sequence[int]) -> list[Observation]:
        """Replace the episodes by copies of ``parents`` (indices into the current ones; one may
        repeat): each copy then steps on its own. How a plan tree forks one episode into the
        different next calls its samples chose (``parpo.policy.plan_tree``)."""
        old, obs = self.episodes, self._obs
        # A step replaces ``candidates`` but appends to ``history`` and ``surfaced``: copy those.
        self.episodes = [
            replace(old[p], history=list(old[p].history), surfaced=set(old[p].surfaced)) for p in parents
        ]
        self._obs = [obs[p] for p in parents]
        return list(self._obs)

    def _observe(self, e: _Episode) -> Observation:
        return Observation(
            task=e.task,
            k=e.k,
            step=len(e.history),
            max_steps=self.cfg.max_steps,
            history=tuple(e.history),
            candidates=e.candidates,
            features=self.catalogue.features(e.candidates, e.view),
            catalogue=self.catalogue,
        )

    # -- step --------------------------------------------------------------------------
    def step(
        self, actions: Sequence[RawAction | None]
    ) -> tuple[list[Observation], dict[str, np.ndarray], np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """One action per episode (None for an episode that has ended).

        Returns observations, reward components (name -> [B] float64, non-zero only where the
        episode ended now), terminated [B], truncated [B] and infos (metrics where it ended).
        """
        if len(actions) != len(self.episodes):
            raise ValueError(f"{len(actions)} actions for {len(self.episodes)} episodes")
        n = len(self.episodes)
        terminated, truncated = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        slates: dict[int, tuple[list[str], dict[str, Any]]] = {}
        ended = []
        for i, (e, raw) in enumerate(zip(self.episodes, actions, strict=True)):
            if e.done:
                if raw is not None:
                    raise ValueError(f"episode {i} ({e.task.task_id}) has ended; pass None for it")
                continue
            if raw is None:
                raise ValueError(f"episode {i} ({e.task.task_id}) needs an action")
            slate = self._apply(e, raw)
            if slate is not None:
                slates[i] = slate
                terminated[i] = True
            elif len(e.history) >= self.cfg.max_steps:
                truncated[i] = True
            if terminated[i] or truncated[i]:
                e.done = True
                ended.append(i)
        rewards = {k: np.zeros(n) for k in COMPONENTS}
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        if ended:
            self._finish(ended, slates, rewards, infos)
        for i, raw in enumerate(actions):
            if raw is not None:  # an episode that had ended keeps its last observation
                self._obs[i] = self._observe(self.episodes[i])
        return list(self._obs), rewards, terminated, truncated, infos

    def _apply(self, e: _Episode, raw: RawAction) -> tuple[list[str], dict[str, Any]] | None:
        """Carry out one call; returns (slate, item accounting) when it was a recommend."""
        try:
            a = parse_action(raw)
        except ActionError as err:
            e.history.append(Call(None, False, str(err)))
            return None
        c = self.catalogue
        if isinstance(a, Search):
            if a.category is not None and a.category not in c.category_code:
                e.history.append(Call(a, False, f"unknown category {a.category!r}"))
                return None
            e.candidates = c.search(a, min(a.k, self.cfg.search_k), e.allowed)
            e.surfaced.update(e.candidates.tolist())
        elif isinstance(a, Filter):
            if not any(h.valid and isinstance(h.action, Search) for h in e.history):
                e.history.append(Call(a, False, "filter before any search"))
                return None
            e.candidates = e.candidates[c.mask(None, a.constraints)[e.candidates]]
        else:
            return self._recommend(e, a)
        e.history.append(Call(a, True))
        return None

    def _recommend(self, e: _Episode, a: Recommend) -> tuple[list[str], dict[str, Any]]:
        rows = self.catalogue.rows(a.items)
        known = rows >= 0
        if e.allowed is not None:
            known[known] = e.allowed[rows[known]]
        seen: set[int] = set()
        slate, unknown, duplicate = [], 0, 0
        for item, r, ok in zip(a.items, rows.tolist(), known.tolist(), strict=True):
            if not ok:
                unknown += 1
            elif r in seen:
                duplicate += 1
            else:
                seen.add(r)
                slate.append(item)
        errors = [f"{n} {what} item(s)" for n, what in ((unknown, "unknown"), (duplicate, "duplicate")) if n]
        e.history.append(Call(a, not errors, "; ".join(errors) or None))
        shown = slate[: e.k]
        acct = {
            "entries": len(a.items),
            "unknown": unknown,
            "duplicate": duplicate,
            "overflow": len(slate) - len(shown),
            "ungrounded": sum(self.catalogue.row[i] not in e.surfaced for i in shown),
        }
        return shown, acct

    # -- rewards -----------------------------------------------------------------------
    def _finish(
        self,
        ended: list[int],
        slates: dict[int, tuple[list[str], dict[str, Any]]],
        rewards: dict[str, np.ndarray],
        infos: list[dict[str, Any]],
    ) -> None:
        c, cfg = self.catalogue, self.cfg
        pref = self._preference([i for i in ended if i in slates], slates)
        for i in ended:
            e = self.episodes[i]
            calls = e.history
            # A recommend whose only fault is its items counts as a valid call (items_valid has it).
            valid_calls = sum(h.valid or isinstance(h.action, Recommend) for h in calls) / len(calls)
            rewards["task/valid_calls"][i] = valid_calls
            slate, acct = slates.get(i, ([], {}))
            info: dict[str, Any] = {
                "task_id": e.task.task_id,
                "steps": len(calls),
                "plan": ">".join(h.signature for h in calls),
                "slate": slate,
                "invalid": [h.error for h in calls if not h.valid],
                **acct,
            }
            if slate:
                rows = c.rows(slate)
                feasible = min(e.k, e.feasible)
                rewards["task/constraints"][i] = e.view.satisfies[rows].sum() / max(len(slate), feasible, 1)
                rewards["task/items_valid"][i] = (
                    acct["entries"] - acct["unknown"] - acct["duplicate"]
                ) / acct["entries"]
                span = cfg.max_steps - 2
                rewards["task/efficiency"][i] = (
                    1.0 if span <= 0 else float(np.clip((cfg.max_steps - len(calls)) / span, 0, 1))
                )
                info["preference_raw"] = pref[i]
            rewards["preference"][i] = pref.get(i, 0.0)
            infos[i] = info
        if pref and self.preference_transform is not None:
            idx = [i for i in ended if i in pref]
            users = [self.episodes[i].task.user_id for i in idx]
            rewards["preference"][idx] = self.preference_transform(users, rewards["preference"][idx])
        self._report(ended, slates, rewards, infos)

    def _preference(
        self, idx: list[int], slates: dict[int, tuple[list[str], dict[str, Any]]]
    ) -> dict[int, float]:
        """Raw preference reward of each ended episode with a slate: one call for the cache misses."""
        keys = [
            (self.episodes[i].task.user_id, self.episodes[i].task.profile, tuple(slates[i][0])) for i in idx
        ]
        return dict(zip(idx, self._pref_cache.lookup(keys, self._score), strict=True))

    def _score(self, keys: list[tuple[str, tuple[str, ...] | None, tuple[str, ...]]]) -> list[float]:
        """The reward model's preference reward of (user, profile, slate) keys [M], in one call."""
        profiles = [None if p is None else list(p) for _, p, _ in keys]
        return self.reward_model.preference_reward(
            [u for u, _, _ in keys],
            [list(s) for _, _, s in keys],
            profiles if any(p is not None for p in profiles) else None,
        ).tolist()

    def _report(
        self,
        ended: list[int],
        slates: dict[int, tuple[list[str], dict[str, Any]]],
        rewards: dict[str, np.ndarray],
        infos: list[dict[str, Any]],
    ) -> None:
        """hit@10 / ndcg@10 against the target, true preference, and the weighted task quality."""
        c = self.catalogue
        pad = len(c)  # a row that never matches a target
        top = np.full((len(ended), 10), pad, dtype=np.int64)
        for j, i in enumerate(ended):
            rows = c.rows(slates.get(i, ([], {}))[0][:10])
            top[j, : rows.size] = rows
        targets = [np.array([c.row.get(self.episodes[i].task.target, pad + 1)]) for i in ended]
        ranking = per_user_ranking_metrics(top, targets, ks=(10,))
        if self.true_interest is not None:
            pairs = [
                (self.episodes[i].task.user_id, item) for i in ended for item in slates.get(i, ([], {}))[0]
            ]
            values = (
                self.true_interest([u for u, _ in pairs], [it for _, it in pairs]) if pairs else np.zeros(0)
            )
            start = 0
        w = self.cfg.task_weights
        for j, i in enumerate(ended):
            info = infos[i]
            info["hit@10"] = float(ranking["hit@10"][j])
            info["ndcg@10"] = float(ranking["ndcg@10"][j])
            info["task_quality"] = float(
                sum(w.get(k, 0.0) * rewards[f"task/{k}"][i] for k in TASK_COMPONENTS)
            )
            if self.true_interest is not None:
                n = len(slates.get(i, ([], {}))[0])
                info["true_preference"] = float(values[start : start + n].mean()) if n else 0.0
                start += n


class Environment:
    """One episode at a time (the DESIGN seam); a one-episode ``BatchEnv`` underneath."""

    def __init__(
        self, catalogue: Catalogue, reward_model: PreferenceModel, cfg: EnvConfig | None = None, **kw: Any
    ) -> None:
        self.batch = BatchEnv(catalogue, reward_model, cfg, **kw)

    def reset(self, task: Task) -> Observation:
        return self.batch.reset([task])[0]

    def step(self, action: RawAction) -> tuple[Observation, dict[str, float], bool, bool, dict[str, Any]]:
        obs, rewards, term, trunc, infos = self.batch.step([action])
        return obs[0], {k: float(v[0]) for k, v in rewards.items()}, bool(term[0]), bool(trunc[0]), infos[0]
