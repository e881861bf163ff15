"""Reading a published reward model: scores and the preference reward, by external ids.

No Lightning import: loading reads ``weights/model.safetensors``, ``metadata.json``
and the id maps of a registry version; scoring is a few batched matmuls.

    rm = RewardModel.load("REG")                       # the production reward version
    rm = RewardModel.load("REG/reward/v000003-...")     # one version folder
    rm.score(["u1", "u1"], ["i9", "i4"])               # {"interest", "conformity", "click", "cold", ...}
    rm.preference_reward(["u1"], [["i9", "i4", "i7"]])  # array([0.83])

Formulas (``docs/reward-model.md``). With the user's vectors ``u_int, u_con`` and
the item's ``i_int, i_con``: ``interest = <u_int, i_int>``, ``conformity =
<u_con, i_con>``, ``click = interest + conformity`` (MF-BPR models have no
conformity branch: ``conformity = 0``, ``interest = click``). The preference
reward of a slate ``i_1..i_K`` for user ``u`` is the position-discounted mean of
the items' interest *percentiles* within the user:

    F_u(i) = ( #{r in R : s_u(r) < s_u(i)} + #{r in R : s_u(r) = s_u(i)} / 2 ) / |R|
    reward = sum_k F_u(i_k) / log2(k + 1)  /  sum_k 1 / log2(k + 1)

where ``s_u = interest`` and ``R`` is a fixed reference set of warm items (all of
them up to ``REFERENCE_ITEMS``). Percentiles make users comparable whatever the
scale of their scores; using the interest score alone drops what the user would
click only because the item is popular (the conformity correction).

Cold start: a user not in the model's id map, or with no train positive, is
``cold``; so is an item. With stage 1 in the version (``stage1.*`` weights,
``reward_models.profile``), a cold user's vectors are the profile map's
``g([z, m, 1{m}])`` where ``z`` is the multi-view encoding of its profile (events,
items, timestamps, features; the id map's user features when the profile brings
none) and ``m`` the mean stage-2 vector of the profile's warm items; a cold item
of the id map gets the attribute map's ``h(category, attributes, price)``.
Without stage 1, or for a user with no evidence at all, the fallbacks: with
recent item ids, the interest vector is their mean interest vector, else the
mean warm user's; conformity is the mean warm user's. Items without a map get
the mean warm item's vectors and a neutral percentile of 0.5.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from parpo_core.artefacts import Registry
from parpo_core.artefacts.errors import RegistryError
from reward_models.artefact_kind import KIND

REFERENCE_ITEMS = 4096
#: Pairs gathered at a time by ``RewardModel.score`` (bounds its memory to a few MiB per branch).
SCORE_BLOCK = 1 << 16
# Relative tolerance (of the user's largest |reference score|) within which scores tie.
TIE_TOL = 1e-6
# metadata ``model_version`` this code scores (absent: 1). Version 2 (hybrid features, impression
# negatives) publishes the same composed vectors, so both read alike.
MODEL_VERSIONS = (1, 2)


class UserProfile(BaseModel):
    """What is known of a user the model has not trained on: events in time order
    (``items[k]`` with ``events[k]`` at ``ts[k]`` Unix seconds; events and ts optional)
    and explicit features (``{"age": "25", "gender": "F"}``)."""

    model_config = ConfigDict(extra="forbid")

    items: list[str] = []
    events: list[str] | None = None
    ts: list[float | None] | None = None
    features: dict[str, str] = {}


ProfileLike = UserProfile | Mapping[str, Any] | Sequence[str] | None
Profiles = Sequence[ProfileLike] | Mapping[str, ProfileLike] | None


def _read_ids(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["id", "index"])
    ids = t.column("id").to_pylist()
    index = t.column("index").to_numpy()
    out: list[str] = [""] * len(ids)
    for k, i in zip(ids, index, strict=True):
        out[int(i)] = k
    return out


class RewardModel:
    """A loaded stage-2 reward model; see the module docstring for the formulas."""

    def __init__(
        self,
        tables: Mapping[str, torch.Tensor],
        user_ids: Sequence[str],
        item_ids: Sequence[str],
        metadata: Mapping[str, Any] | None = None,
        *,
        name: str = "",
    ) -> None:
        self.metadata, self.name = dict(metadata or {}), name
        mv = self.metadata.get("model_version", 1)
        if mv not in MODEL_VERSIONS:
            raise RegistryError(
                f"{name or 'reward model'}: model_version {mv} is not one this code reads "
                f"({', '.join(map(str, MODEL_VERSIONS))}); upgrade parpo to load it"
            )
        self.branches = [b for b in ("interest", "conformity") if f"user_{b}" in tables]
        self.user = {b: tables[f"user_{b}"].float() for b in self.branches}
        self.item = {b: tables[f"item_{b}"].float() for b in self.branches}
        n_users, n_items = self.user["interest"].shape[0], self.item["interest"].shape[0]
        ones_u, ones_i = torch.ones(n_users, dtype=torch.bool), torch.ones(n_items, dtype=torch.bool)
        self.user_seen = tables["user_seen"].bool() if "user_seen" in tables else ones_u
        self.item_seen = tables["item_seen"].bool() if "item_seen" in tables else ones_i
        self.user_index = {k: i for i, k in enumerate(user_ids)}
        self.item_index = {k: i for i, k in enumerate(item_ids)}
        self.mean_user = {b: _mean(v, self.user_seen) for b, v in self.user.items()}
        self.mean_item = {b: _mean(v, self.item_seen) for b, v in self.item.items()}
        warm = torch.nonzero(self.item_seen).flatten()
        if warm.numel() > REFERENCE_ITEMS:  # a fixed subset: the same reference set on every load
            g = torch.Generator().manual_seed(0)
            warm = warm[torch.randperm(warm.numel(), generator=g)[:REFERENCE_ITEMS]].sort().values
        self.reference = warm
        self.stage1 = None
        if "stage1" in self.metadata and any(k.startswith("stage1.") for k in tables):
            from reward_models.profile.model import ProfileModel

            self.stage1 = ProfileModel.from_tensors(tables, self.metadata["stage1"])

    @property
    def disentangled(self) -> bool:
        return "conformity" in self.branches

    # -- loading ---------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, version: str | None = None, *, verify: bool = True) -> RewardModel:
        """A registry root (``version`` or production of kind ``reward``) or a version folder."""
        path = Path(path)
        if (path / "manifest.json").is_file():
            if version is not None:
                raise RegistryError(
                    f"{path} is one version folder; version={version!r} needs a registry root"
                )
            reg, kind, name = Registry(path.parent.parent), path.parent.name, path.name
        else:
            reg, kind, name = Registry(path), KIND, version
        v = reg.open(kind, name, verify=verify)
        if v.kind != KIND:
            raise RegistryError(f"{v.label} is not a reward model")
        tables = v.load_weights()
        return cls(
            tables,
            _read_ids(v.file("idmaps/users.parquet")),
            _read_ids(v.file("idmaps/items.parquet")),
            v.metadata,
            name=v.label,
        )

    # -- vectors -------------------------------------------------------------------------
    def user_vectors(
        self, user_ids: Sequence[str], profiles: Profiles = None
    ) -> tuple[dict[str, torch.Tensor], np.ndarray]:
        """Vectors of the users (branch -> [B, d]) and their cold flags [B] bool."""
        idx = torch.tensor([self.user_index.get(u, -1) for u in user_ids], dtype=torch.int64)
        known = idx >= 0
        known[known.clone()] = self.user_seen[idx[known]]
        out = {}
        for b in self.branches:
            v = self.mean_user[b].expand(len(user_ids), -1).clone()
            v[known] = self.user[b][idx[known]]
            out[b] = v
        cold = ~known
        if self.stage1 is not None and bool(cold.any()):
            self._stage1_users(out, torch.nonzero(cold).flatten(), user_ids, idx, profiles)
        elif profiles is not None and bool(cold.any()):
            for row in torch.nonzero(cold).flatten().tolist():
                p = _profile(profiles, user_ids, row)
                ii = [self.item_index.get(i, -1) for i in (p.items if p else [])]
                ii = torch.tensor([i for i in ii if i >= 0], dtype=torch.int64)
                ii = ii[self.item_seen[ii]] if ii.numel() else ii
                if ii.numel():
                    out["interest"][row] = self.item["interest"][ii].mean(0)
        return out, cold.numpy()

    @torch.no_grad()
    def _stage1_users(
        self,
        out: dict[str, torch.Tensor],
        rows: torch.Tensor,
        user_ids: Sequence[str],
        idx: torch.Tensor,
        profiles: Profiles,
    ) -> None:
        """Fill ``out``'s cold ``rows`` [C] with the profile map's vectors (users with any evidence)."""
        from reward_models.profile.views import ProfileLog, feature_matrix

        s1, spec = self.stage1, self.stage1.spec
        ev = {e: k for k, e in enumerate(spec.events)}
        log_rows, items, events, ts = [], [], [], []
        feats = torch.zeros(rows.numel(), s1.user_features.shape[1])
        for k, row in enumerate(rows.tolist()):
            p = _profile(profiles, user_ids, row) or UserProfile()
            n = len(p.items)
            kinds = p.events if p.events is not None else [None] * n
            times = p.ts if p.ts is not None else [None] * n
            if len(kinds) != n or len(times) != n:
                raise ValueError(f"profile of {user_ids[row]!r}: items, events and ts differ in length")
            for item, kind, t in zip(p.items, kinds, times, strict=True):
                if kind is not None and kind not in ev:
                    continue  # impressions and unknown event types are not evidence of taste
                log_rows.append(k)
                items.append(self.item_index.get(item, -1))
                events.append(ev[kind] if kind is not None else -1)
                ts.append(float("nan") if t is None else float(t))
            if p.features:
                feats[k] = feature_matrix(spec, [p.features])[0]
            elif int(idx[row]) >= 0:
                feats[k] = s1.user_features[idx[row]]
        log = ProfileLog(
            rows.numel(),
            torch.tensor(log_rows, dtype=torch.int64),
            torch.tensor(items, dtype=torch.int64),
            torch.tensor(events, dtype=torch.int64),
            torch.tensor(ts, dtype=torch.float64),
        )
        evidence = (torch.bincount(log.row, minlength=rows.numel()) > 0) | (feats.abs().sum(1) > 0)
        if not bool(evidence.any()):
            return
        items_all = torch.cat([self.item[b] for b in self.branches], 1)
        pred = s1.split(s1.user_vectors(log, feats, items_all, self.item_seen))
        for b in self.branches:
            out[b][rows[evidence]] = pred[b][evidence]

    def item_vectors(self, item_ids: Sequence[str]) -> tuple[dict[str, torch.Tensor], np.ndarray]:
        """Vectors of the items (branch -> [N, d]) and their cold flags [N] bool."""
        out, cold, _ = self._item_vectors(item_ids)
        return out, cold

    @torch.no_grad()
    def _item_vectors(
        self, item_ids: Sequence[str]
    ) -> tuple[dict[str, torch.Tensor], np.ndarray, np.ndarray]:
        """``item_vectors`` and [N] bool: cold items placed by the attribute map."""
        idx = torch.tensor([self.item_index.get(i, -1) for i in item_ids], dtype=torch.int64)
        known = idx >= 0
        known[known.clone()] = self.item_seen[idx[known]]
        mapped = (idx >= 0) & ~known if self.stage1 is not None else torch.zeros_like(known)
        out = {}
        pred = self.stage1.split(self.stage1.item_vectors(idx[mapped])) if bool(mapped.any()) else {}
        for b in self.branches:
            v = self.mean_item[b].expand(len(item_ids), -1).clone()
            v[known] = self.item[b][idx[known]]
            if pred:
                v[mapped] = pred[b]
            out[b] = v
        return out, (~known).numpy(), mapped.numpy()

    # -- scoring --------------------------------------------------------------------------
    @torch.no_grad()
    def score(
        self, user_ids: Sequence[str], item_ids: Sequence[str], profiles: Profiles = None
    ) -> dict[str, np.ndarray]:
        """Scores of the pairs (user_ids[k], item_ids[k]); every value is [N].

        Returns ``interest``, ``conformity``, ``click`` (float32) and ``cold``,
        ``cold_user``, ``cold_item`` (bool). ``profiles``: what is known of users the model
        has not trained on (``UserProfile``, its dict form, or a list of recent item ids),
        aligned with ``user_ids`` or keyed by user id.
        """
        if len(user_ids) != len(item_ids):
            raise ValueError(
                f"user_ids ({len(user_ids)}) and item_ids ({len(item_ids)}) must have the same length"
            )
        uniq = list(dict.fromkeys(user_ids))
        if profiles is not None and not isinstance(profiles, Mapping):
            profiles = {u: p for u, p in zip(user_ids, profiles, strict=True)}
        uv, ucold = self.user_vectors(uniq, profiles)
        row = torch.tensor(_positions(uniq, user_ids), dtype=torch.int64)
        items = list(dict.fromkeys(item_ids))
        iv, icold_u = self.item_vectors(items)
        col = torch.tensor(_positions(items, item_ids), dtype=torch.int64)
        icold = icold_u[col.numpy()]
        s = {b: _pair_dots(uv[b], row, iv[b], col) for b in self.branches}
        interest = s["interest"].numpy()
        conformity = s["conformity"].numpy() if self.disentangled else np.zeros_like(interest)
        cu = ucold[row.numpy()] if len(user_ids) else np.zeros(0, dtype=bool)
        return {
            "interest": interest,
            "conformity": conformity,
            "click": interest + conformity,
            "cold": cu | icold,
            "cold_user": cu,
            "cold_item": icold,
        }

    @torch.no_grad()
    def score_matrix(
        self, user_ids: Sequence[str], item_ids: Sequence[str], profiles: Profiles = None
    ) -> dict[str, np.ndarray]:
        """Every user against every item: ``interest`` and ``conformity`` [U, I] float32 (one matrix
        product per branch: a catalogue-wide table never gathers a vector per pair), ``cold_item``
        [I] bool. The same values as ``score`` on the U x I pairs (up to float summation order)."""
        uv, _ = self.user_vectors(list(user_ids), profiles)
        iv, icold = self.item_vectors(item_ids)
        s = {b: (uv[b] @ iv[b].T).numpy() for b in self.branches}
        interest = s["interest"]
        conformity = s["conformity"] if self.disentangled else np.zeros_like(interest)
        return {"interest": interest, "conformity": conformity, "cold_item": icold}

    @torch.no_grad()
    def preference_reward(
        self, user_ids: Sequence[str], slates: Sequence[Sequence[str]], profiles: Profiles = None
    ) -> np.ndarray:
        """Preference reward in [0, 1] of each user's slate; [B] float64 (empty slate: 0)."""
        if len(user_ids) != len(slates):
            raise ValueError(
                f"user_ids ({len(user_ids)}) and slates ({len(slates)}) must have the same length"
            )
        b = len(user_ids)
        if b == 0:
            return np.zeros(0)
        if profiles is not None and not isinstance(profiles, Mapping):
            profiles = {u: p for u, p in zip(user_ids, profiles, strict=True)}
        # The reference scores are sorted once per distinct user (G rollouts of a task share one).
        uniq = list(dict.fromkeys(user_ids))
        inverse = torch.tensor(_positions(uniq, user_ids), dtype=torch.int64)
        uv, _ = self.user_vectors(uniq, profiles)
        u = uv["interest"][inverse]  # [B, d]
        ref = torch.sort(uv["interest"] @ self.item["interest"][self.reference].T, dim=1).values[
            inverse
        ]  # [B, R]
        width = max((len(s) for s in slates), default=0)
        if width == 0:
            return np.zeros(b)
        flat = [i for s in slates for i in s]
        iv, icold, mapped = self._item_vectors(flat)
        neutral = icold & ~mapped
        lengths = torch.tensor([len(s) for s in slates])
        rows = torch.repeat_interleave(torch.arange(b), lengths)
        cols = torch.cat([torch.arange(n) for n in lengths.tolist()])
        scores = torch.full((b, width), float("nan"))
        scores[rows, cols] = (u[rows] * iv["interest"]).sum(-1)
        # Scores within TIE_TOL (relative) of a reference score tie with it: the slate's scores and
        # the reference come from different kernels and user batches, and items with one vector
        # (never-trained items read as the mean warm item) tie as a group that rounding would flip.
        s = scores.nan_to_num(0.0)
        tol = TIE_TOL * ref.abs().amax(1, keepdim=True).clamp(min=1e-12)
        lo = torch.searchsorted(ref, (s - tol).contiguous(), right=False)
        hi = torch.searchsorted(ref, (s + tol).contiguous(), right=True)
        pct = (lo + hi).double() / (2.0 * ref.shape[1])
        pct[rows[torch.from_numpy(neutral)], cols[torch.from_numpy(neutral)]] = 0.5  # no evidence: neutral
        disc = 1.0 / torch.log2(torch.arange(width, dtype=torch.float64) + 2.0)
        mask = torch.zeros(b, width, dtype=torch.float64)
        mask[rows, cols] = 1.0
        w = mask * disc
        denom = w.sum(1)
        reward = torch.where(
            denom > 0, (pct * w).sum(1) / denom.clamp(min=1e-12), torch.zeros(b, dtype=torch.float64)
        )
        return reward.clamp(0.0, 1.0).numpy()


def _mean(v: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    return v[seen].mean(0) if bool(seen.any()) else torch.zeros(v.shape[1])


def _pair_dots(u: torch.Tensor, row: torch.Tensor, v: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
    """[N] dot products ``u[row[k]] . v[col[k]]`` (u [U, d], v [I, d]), gathered ``SCORE_BLOCK`` pairs
    at a time: a catalogue-wide batch of pairs never holds two [N, d] copies at once."""
    out = torch.empty(row.numel(), dtype=u.dtype)
    for s in range(0, row.numel(), SCORE_BLOCK):
        out[s : s + SCORE_BLOCK] = (u[row[s : s + SCORE_BLOCK]] * v[col[s : s + SCORE_BLOCK]]).sum(-1)
    return out


def _positions(uniq: list[str], ids: Sequence[str]) -> list[int]:
    pos = {u: k for k, u in enumerate(uniq)}
    return [pos[u] for u in ids]


def _profile(profiles: Profiles, user_ids: Sequence[str], row: int) -> UserProfile | None:
    """The profile of ``user_ids[row]`` as a ``UserProfile`` (a bare list of item ids: its items)."""
    if profiles is None:
        return None
    p = profiles.get(user_ids[row]) if isinstance(profiles, Mapping) else profiles[row]
    if p is None or isinstance(p, UserProfile):
        return p
    if isinstance(p, Mapping):
        return UserProfile.model_validate(p)
    return UserProfile(items=list(p))
