"""Observations -> fixed-shape tensors for the native backend (fixed shapes let rollouts of any
step or batch be concatenated for PPO without re-padding).

Keys of the encoded batch (B observations; N = ``max_candidates``, H = ``history``):
``user`` [B, U] float32 the reward model's user vectors (all branches, concatenated; cold users
through their profile), ``request`` [B, 5] float32 (has category, has price cap, scaled cap,
has attributes, cold), ``step`` [B] int64, ``history`` [B, H] int64 call codes,
``cand_rows`` [B, N] int64 catalogue rows (0 where padded), ``cand_feats`` [B, N, F] float32
catalogue features (then ``PERSONAL_FEATURES`` when the policy uses them), ``cand_mask`` [B, N]
bool, ``tool_mask`` [B, 3] bool, ``scope_free`` and ``constrain_free`` [B] bool, ``n_pick`` [B]
int64 pointers a recommend fills; with ``memory_skills`` M > 0 also ``skills`` [B, M, S] float32
the retrieved skills' ``SKILL_FEATURES`` and ``skill_mask`` [B, M] bool (parpo.memory).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from parpo.env.cache import BoundedCache
from parpo.env.catalogue import FEATURES, Catalogue
from parpo.env.observation import Observation
from parpo.env.personal import PERSONAL_FEATURES, PersonalTables
from parpo.env.reward_model import RewardModel
from parpo.memory.policy_memory import SKILL_FEATURES, PolicyMemory
from parpo.policy.tokens import choice_masks, history_codes

N_REQUEST = 5
HISTORY = 8
#: Cached user vectors (least recently used evicted past this): serving sees endless user ids.
USER_CACHE_LIMIT = 100_000


class Featurizer:
    """Encodes observations; warm users' vectors are cached (they never change for a reward version)."""

    def __init__(
        self,
        reward_model: RewardModel,
        catalogue: Catalogue,
        max_candidates: int,
        max_k: int,
        personal: bool = False,
        memory_skills: int = 0,
    ) -> None:
        self.reward_model, self.catalogue = reward_model, catalogue
        self.memory_skills = memory_skills
        #: the skill memory retrieved from (set by the trainer or at load); None: no skills
        self.memory: PolicyMemory | None = None
        self.max_candidates, self.max_k, self.personal = max_candidates, max_k, personal
        self.features = (*FEATURES, *(PERSONAL_FEATURES if personal else ()))
        self._users: BoundedCache[tuple[str, tuple[str, ...] | None], np.ndarray] = BoundedCache(
            USER_CACHE_LIMIT
        )
        self._personal = PersonalTables(reward_model, catalogue)
        price = np.nan_to_num(catalogue.price, nan=0.0)
        self._max_price = float(price.max(initial=0.0))
        self._log_max_price = float(np.log1p(self._max_price)) or 1.0
        self.user_dim = int(self._user_vectors(["\x00probe"], [None]).shape[1])

    def _user_vectors(self, users: Sequence[str], profiles: Sequence[Sequence[str] | None]) -> np.ndarray:
        prof = {u: list(p) for u, p in zip(users, profiles, strict=True) if p is not None}
        vecs, _ = self.reward_model.user_vectors(list(users), prof or None)
        return torch.cat([vecs[b] for b in sorted(vecs)], dim=1).numpy().astype(np.float32)

    def users(self, observations: Sequence[Observation]) -> np.ndarray:
        """[B, U] user vectors, one reward-model call per distinct (user, profile) of the batch;
        warm users (no profile) are cached, cold ones are not (serving sees endless profiles)."""
        keys = [(o.task.user_id, o.task.profile) for o in observations]
        vecs = self._users.lookup(
            keys,
            lambda todo: list(self._user_vectors([u for u, _ in todo], [p for _, p in todo])),
            keep=lambda k: k[1] is None,
        )
        return np.stack(vecs)

    def personal_tables(self, observations: Sequence[Observation]) -> list[np.ndarray]:
        """[n_items, 4] ``PERSONAL_FEATURES`` per observation (``parpo.env.personal``); warm users'
        tables are cached."""
        return self._personal.lookup([(o.task.user_id, o.task.profile) for o in observations])

    def encode(self, observations: Sequence[Observation]) -> dict[str, Tensor]:
        b, n, f = len(observations), self.max_candidates, len(self.features)
        tables = self.personal_tables(observations) if self.personal else None
        request = np.zeros((b, N_REQUEST), dtype=np.float32)
        step = np.zeros(b, dtype=np.int64)
        history = np.zeros((b, HISTORY), dtype=np.int64)
        rows = np.zeros((b, n), dtype=np.int64)
        feats = np.zeros((b, n, f), dtype=np.float32)
        cmask = np.zeros((b, n), dtype=bool)
        tools = np.zeros((b, 3), dtype=bool)
        scope, constrain = np.zeros(b, dtype=bool), np.zeros(b, dtype=bool)
        n_pick = np.zeros(b, dtype=np.int64)
        for i, o in enumerate(observations):
            req = o.task.request
            cap = req.constraints.price_max
            request[i] = (
                req.category is not None,
                cap is not None,
                # A cap above every price constrains nothing: clipped, the feature stays in [0, 1].
                np.log1p(min(cap, self._max_price)) / self._log_max_price if cap is not None else 0.0,
                bool(req.constraints.attributes),
                o.task.cold,
            )
            step[i] = o.step
            history[i] = history_codes(o.history, HISTORY)
            m = min(len(o.candidates), n)
            rows[i, :m] = o.candidates[:m]
            feats[i, :m, : len(FEATURES)] = o.features[:m]
            if tables is not None:
                feats[i, :m, len(FEATURES) :] = tables[i][o.candidates[:m]]
            cmask[i, :m] = True
            tools[i], scope[i], constrain[i], n_pick[i] = choice_masks(o, self.max_k)
            n_pick[i] = min(n_pick[i], m)
            tools[i, 2] &= m > 0
        memory = {}
        if self.memory_skills:
            tasks = [o.task for o in observations]
            skills, skill_mask = (
                self.memory.encode(tasks, self.memory_skills)
                if self.memory is not None
                else (np.zeros((b, self.memory_skills, len(SKILL_FEATURES)), np.float32),
                      np.zeros((b, self.memory_skills), bool))
            )  # fmt: skip
            memory = {"skills": torch.from_numpy(skills), "skill_mask": torch.from_numpy(skill_mask)}
        return {
            **memory,
            "user": torch.from_numpy(self.users(observations)),
            "request": torch.from_numpy(request),
            "step": torch.from_numpy(step),
            "history": torch.from_numpy(history),
            "cand_rows": torch.from_numpy(rows),
            "cand_feats": torch.from_numpy(feats),
            "cand_mask": torch.from_numpy(cmask),
            "tool_mask": torch.from_numpy(tools),
            "scope_free": torch.from_numpy(scope),
            "constrain_free": torch.from_numpy(constrain),
            "n_pick": torch.from_numpy(n_pick),
        }
