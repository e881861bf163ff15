"""LightningDataModule over a split: the triple stream for training, user chunks for validation.

Training batches come from ``TripleStream`` (global draw, sharded per rank);
validation users are split across ranks (``users[rank::world]``) and each
rank's sums are reduced by the module. The stream's state (epoch, consumed
batches, sampler generator) is the datamodule's ``state_dict``, which Lightning
stores in every checkpoint and restores on resume.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

from reward_models.config import RewardConfig
from reward_models.curriculum import Curriculum
from reward_models.data import RewardData
from reward_models.exposure import ImpressionTriples
from reward_models.sampler import PopularityNegativeSampler
from reward_models.training.stream import TripleStream

SAMPLER_SEED_OFFSET = 7919  # the sampler's stream is distinct from the model init's


def make_stream(data: RewardData, cfg: RewardConfig, rank: int = 0, world: int = 1) -> TripleStream:
    """The sampler + curriculum + sharding for one rank (the same global draw on every rank)."""
    g = torch.Generator().manual_seed(cfg.runtime.seed + SAMPLER_SEED_OFFSET)
    sampler = PopularityNegativeSampler(
        torch.from_numpy(data.train_user),
        torch.from_numpy(data.train_item),
        data.n_users,
        data.n_items,
        popularity=torch.from_numpy(data.popularity),
        weight=torch.from_numpy(data.train_weight),
        generator=g,
        p_more=cfg.sampler.p_more,
        reweight_alpha=cfg.model.reweight,
    )
    m, s = cfg.model, cfg.sampler
    curriculum = Curriculum(
        margin=s.margin,
        margin_decay=s.margin_decay,
        int_weight=m.weights.int,
        con_weight=m.weights.con,
        loss_decay=s.loss_decay,
    )
    use_dcor = m.disentangle and m.discrepancy != "none"
    imp = None
    if data.exposure is not None and data.exposure.n_train > 0:
        e = cfg.exposure
        imp = ImpressionTriples(
            data.exposure, data.train, sampler.pop, e.weight, e.interest == "exposed", e.pointwise > 0
        )
    return TripleStream(
        sampler,
        curriculum,
        cfg.train.batch_for(data.n_train),
        seed=cfg.runtime.seed,
        rank=rank,
        world=world,
        dcor_sample=m.dcor_sample if use_dcor else 0,
        click_correction=s.click_correction,
        impressions=imp,
    )


def fixed_sample(users: np.ndarray, cfg: RewardConfig) -> np.ndarray:
    """Of the sorted user indices ``users`` [U], the ones evaluated during training [V] sorted: all
    of them, or a fixed sample of ``eval.valid_users`` (seeded by ``eval.seed``: the same users at
    every evaluation)."""
    n = cfg.eval.valid_users
    if n == 0 or users.size <= n:
        return users
    return np.sort(np.random.default_rng(cfg.eval.seed).choice(users, n, replace=False))


def valid_sample(data: RewardData, cfg: RewardConfig) -> np.ndarray:
    """The valid users ranked during training [V] sorted (``fixed_sample`` of those with a valid positive)."""
    return fixed_sample(np.flatnonzero(data.valid.lengths() > 0), cfg)


class UserChunks:
    """Batches of user indices (one iterable: Lightning reads a plain list as several loaders)."""

    def __init__(self, chunks: list[torch.Tensor]) -> None:
        self.chunks = chunks or [torch.empty(0, dtype=torch.int64)]

    def __iter__(self):
        return iter(self.chunks)

    def __len__(self) -> int:
        return len(self.chunks)


class RewardDataModule(pl.LightningDataModule):
    def __init__(self, data: RewardData, cfg: RewardConfig) -> None:
        super().__init__()
        self.data, self.cfg = data, cfg
        self.stream: TripleStream | None = None
        self._pending: dict[str, Any] | None = None

    def setup(self, stage: str) -> None:
        if self.stream is None:
            rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
            self.stream = make_stream(self.data, self.cfg, rank, world)
            if self._pending is not None:
                self.stream.load_state_dict(self._pending)
                self._pending = None

    def train_dataloader(self) -> TripleStream:
        assert self.stream is not None
        return self.stream

    def val_dataloader(self) -> UserChunks:
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer else (0, 1)
        users = valid_sample(self.data, self.cfg)[rank::world]
        b = self.cfg.eval.batch_users
        return UserChunks([torch.from_numpy(users[s : s + b]) for s in range(0, users.size, b)])

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if device.type == "cpu":  # the stream's tensors are already there: skip walking the batch
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def state_dict(self) -> dict[str, Any]:
        return {"stream": self.stream.state_dict()} if self.stream is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "stream" not in state:
            return
        if self.stream is None:  # restored before setup: apply when the stream exists
            self._pending = state["stream"]
        else:
            self.stream.load_state_dict(state["stream"])
