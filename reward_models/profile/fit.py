"""Fitting stage 1: the encoder (self-supervised, before stage 2) and the maps (after it).

Every warm user contributes two profiles: its whole train history and a *pseudo-cold*
one, its earliest ``min(n, max(3, ceil(0.2 n)))`` train events — the size of a cold
user's ``cold_profile`` (docs/splits.md) — so the encoder and the user map see, in
training, profiles like the ones they must place at scoring time.

The maps are fitted on the ranking geometry, not on raw coordinates: for a user the
loss is ``delta^T G delta`` with ``delta = u_hat - u`` and ``G = I^T I / n`` over the
warm items' stage-2 vectors (so ``delta^T G delta`` is the mean squared error of the
scores ``<u_hat, i>`` over warm items), plus a small ridge ``0.01 * mean(diag G)``
so directions no item spans stay bounded; items symmetrically with warm users.
Plain torch, full CPU minibatches, seeded (``runtime.seed``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl
import torch
from torch import Tensor

from data_pipelines.dataset import Dataset
from data_pipelines.splits import load_split
from reward_models.config import RewardConfig, Stage1Config
from reward_models.data import RewardData
from reward_models.profile.encoder import info_nce, view_dropout
from reward_models.profile.model import ProfileModel
from reward_models.profile.spec import build_spec, item_side
from reward_models.profile.views import ProfileLog, build_views, feature_matrix, fit_scales

MIN_PROFILE, PROFILE_SHARE = 3, 0.2  # the cold_profile size rule of data_pipelines.splits


@dataclass
class Stage1Data:
    """Warm users' logs (full and pseudo-cold), in id-map rows: ``warm`` [W] user rows."""

    model: ProfileModel
    warm: Tensor
    full: ProfileLog
    short: ProfileLog


def features_of(users: pl.DataFrame | None, user_ids: list[str]) -> list[dict[str, str] | None]:
    """The users table's features of ``user_ids`` (None for users without a row)."""
    if users is None or users.height == 0:
        return [None] * len(user_ids)
    by_id = {
        u: {kv["key"]: kv["value"] for kv in (f or [])}
        for u, f in zip(users["user_id"].to_list(), users["features"].to_list(), strict=True)
    }
    return [by_id.get(u) for u in user_ids]


def pseudo_cold(train: pl.DataFrame) -> pl.DataFrame:
    """Each user's earliest ``min(n, max(3, ceil(0.2 n)))`` rows (by ts, then seq)."""
    k = pl.max_horizontal(pl.lit(MIN_PROFILE), (pl.len() * PROFILE_SHARE).ceil().cast(pl.Int64))
    return (
        train.sort("user_id", "ts", "seq", nulls_last=True)
        .with_columns(pl.int_range(pl.len()).over("user_id").alias("__r"), k.over("user_id").alias("__k"))
        .filter(pl.col("__r") < pl.col("__k"))
        .drop("__r", "__k")
    )


def prepare(ds: Dataset, data: RewardData, cfg: RewardConfig, branches: list[str]) -> Stage1Data:
    """Spec, item side arrays and warm users' logs of ``data``'s split; an untrained ``ProfileModel``."""
    s1 = cfg.stage1
    train = load_split(ds, data.split, data.seed, data.rule, algorithm=data.algorithm).train
    ref = train["ts"].max()
    ref_time = ref.timestamp() if ref is not None else 0.0
    users_table = ds.table("users") if s1.user_features else None
    spec = build_spec(ds.items(), users_table, ref_time)
    item_index = {k: i for i, k in enumerate(data.item_ids())}
    side = item_side(spec, ds.items(), item_index, data.n_items)
    users = data.user_ids()
    warm = torch.from_numpy(data.seen_users()).nonzero().flatten()
    warm_ids = [users[i] for i in warm.tolist()]
    full = ProfileLog.from_frame(train, spec, warm_ids, item_index)
    short = ProfileLog.from_frame(pseudo_cold(train), spec, warm_ids, item_index)
    pop = torch.from_numpy(data.popularity).double()
    feats = feature_matrix(spec, features_of(users_table, users))
    raw, mask = build_views(spec, full, side, pop, feats[warm])
    spec = fit_scales(spec, raw["activity"], mask[:, spec.names.index("activity")])
    with torch.random.fork_rng():  # seeded initialisation, the caller's global RNG left as it was
        torch.manual_seed(cfg.runtime.seed)
        model = ProfileModel(
            spec,
            side,
            pop,
            feats,
            dim=s1.dim,
            hidden=s1.hidden,
            map_hidden=s1.map_hidden,
            branches=branches,
            branch_dim=cfg.model.dim,
        )
    return Stage1Data(model, warm, full, short)


def _take(log: ProfileLog, rows: Tensor) -> ProfileLog:
    """The sub-log of users ``rows`` [B] (renumbered 0..B-1)."""
    pos = torch.full((log.n_users,), -1, dtype=torch.int64)
    pos[rows] = torch.arange(rows.numel())
    keep = pos[log.row] >= 0
    return ProfileLog(rows.numel(), pos[log.row[keep]], log.item[keep], log.event[keep], log.ts[keep])


def _steps(n: int, size: int, epochs: int, cap: int, g: torch.Generator) -> Iterator[Tensor]:
    """The row batches of ``epochs`` passes over ``n`` rows, at most ``cap`` of them (0: all); each
    epoch's permutation is drawn when the epoch starts, as a plain double loop would."""
    batches = (b for _ in range(epochs) for b in torch.randperm(n, generator=g).split(size))
    return itertools.islice(batches, cap or None)


def fit_encoder(d: Stage1Data, s1: Stage1Config, seed: int) -> dict[str, float]:
    """Reconstruction + InfoNCE (view dropout) on the full and pseudo-cold profiles of warm users."""
    g = torch.Generator().manual_seed(seed)
    m, enc = d.model, d.model.encoder
    feats = m.user_features[d.warm]
    rows = []
    for log in (d.full, d.short):
        views, mask = build_views(m.spec, log, m.side, m.popularity, feats)
        rows.append((views, mask))
    views = {k: torch.cat([r[0][k] for r in rows]) for k in rows[0][0]}
    mask = torch.cat([r[1] for r in rows])
    opt = torch.optim.Adam(enc.parameters(), lr=s1.lr, weight_decay=s1.weight_decay)
    last = {}
    for b in _steps(mask.shape[0], s1.batch_size, s1.epochs, s1.max_steps, g):
        vb, mb = {k: v[b] for k, v in views.items()}, mask[b]
        z, _ = enc(vb, mb)
        rec = enc.reconstruction(z, vb, mb)
        z1, _ = enc(vb, view_dropout(mb, s1.view_dropout, g))
        z2, _ = enc(vb, view_dropout(mb, s1.view_dropout, g))
        nce = info_nce(z1, z2, s1.temperature) if b.numel() > 1 else torch.zeros(())
        loss = rec + s1.nce_weight * nce
        opt.zero_grad()
        loss.backward()
        opt.step()
        last = {"reconstruction": rec.item(), "info_nce": nce.item()}
    enc.eval()
    return last


@torch.no_grad()
def profiles(d: Stage1Data, n_users: int) -> Tensor:
    """z [n_users, dim] of every id-map user: warm users from their full train history, others 0."""
    z = torch.zeros(n_users, d.model.encoder.dim)
    z[d.warm] = d.model.encode(d.full, d.model.user_features[d.warm])[0]
    return z


def _gram(v: Tensor) -> Tensor:
    g = v.T @ v / max(v.shape[0], 1)
    return g + 0.01 * g.diagonal().mean() * torch.eye(g.shape[0])


def _fit_map(net: torch.nn.Module, x: Tensor, y: Tensor, gram: Tensor, s1: Stage1Config, g) -> float:
    """Minimise mean (net(x) - y)^T gram (net(x) - y) over rows of x [N, in], y [N, out] (offsets)."""
    opt = torch.optim.Adam(net.parameters(), lr=s1.lr, weight_decay=s1.weight_decay)
    loss = torch.zeros(())
    for b in _steps(x.shape[0], s1.batch_size, s1.map_epochs, s1.max_steps, g):
        delta = net(x[b]) - y[b]
        loss = ((delta @ gram) * delta).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    return loss.item()


def fit_maps(
    d: Stage1Data,
    user: Tensor,
    item: Tensor,
    item_seen: Tensor,
    s1: Stage1Config,
    seed: int,
) -> dict[str, float]:
    """Fit the user map (full + pseudo-cold profiles of warm users -> their stage-2 vectors ``user``
    [n_users, nb * d]) and the item map (warm items' side features -> ``item`` [n_items, nb * d])."""
    g = torch.Generator().manual_seed(seed)
    m = d.model
    feats = m.user_features[d.warm]
    with torch.no_grad():
        x = torch.cat(
            [m.map_input(m.encode(log, feats)[0], log, item, item_seen) for log in (d.full, d.short)]
        )
    m.user_mean.copy_(user[d.warm].mean(0))
    y = (user[d.warm] - m.user_mean).repeat(2, 1)
    out = {"user_map": _fit_map(m.user_map, x, y, _gram(item[item_seen]), s1, g)}
    warm_items = item_seen.nonzero().flatten()
    m.item_mean.copy_(item[warm_items].mean(0))
    xi = m.side.features(len(m.spec.categories))[warm_items]
    out["item_map"] = _fit_map(m.item_map, xi, item[warm_items] - m.item_mean, _gram(user[d.warm]), s1, g)
    return out


def link_init(z: Tensor, width: int, std: float, seed: int) -> Tensor:
    """Stage-2 initial user rows [n_users, width] from profiles z [n_users, D]: a fixed Gaussian
    projection rescaled to ``std`` (users with similar profiles start close; zero rows stay random)."""
    g = torch.Generator().manual_seed(seed)
    proj = z @ torch.randn(z.shape[1], width, generator=g)
    scale = proj[proj.abs().sum(1) > 0].std() if bool((proj.abs().sum(1) > 0).any()) else 1.0
    out = proj * (std / max(float(scale), 1e-12))
    empty = z.abs().sum(1) == 0
    out[empty] = torch.randn(int(empty.sum()), width, generator=g) * std
    return out


def fit_stage1_encoder(ds: Dataset, data: RewardData, cfg: RewardConfig) -> tuple[Stage1Data, Tensor, dict]:
    """Prepare and fit the encoder; the profiles z [n_users, dim] of every id-map user."""
    branches = ["interest", "conformity"] if cfg.model.disentangle else ["interest"]
    d = prepare(ds, data, cfg, branches)
    losses = fit_encoder(d, cfg.stage1, cfg.runtime.seed)
    return d, profiles(d, data.n_users), losses
