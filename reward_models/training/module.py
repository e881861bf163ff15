"""LightningModule of the stage-2 reward model: DICE losses, full-sort validation, exact-resume state.

Validation ranks every item for each valid user (all of them, or the fixed sample
``eval.valid_users``) by the click score (train items masked) and reduces the per-rank sums
of each metric across ranks, so ``valid/ndcg@10`` is the mean over those users whatever the
number of ranks. With impressions it also logs ``valid/exposure_logloss`` (on the same users'
held-out impressions); when the uniform set's selection half is the target,
``valid/uniform_ndcg@10`` (on a fixed sample of as many of its users; every rank computes them on
the same full tables). ``selection`` says which one early stopping and the best evaluation watch
(``reward_models.selection``). Checkpoints also carry
the python, numpy and torch RNG states (the sampler's generator travels in the
datamodule's state), as plain lists and tensors: loadable with
``torch.load(weights_only=True)``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

from data_pipelines.metrics import csr_rows, per_user_ranking_metrics, topk_from_scores
from parpo_core.rng import rng_state, set_rng_state
from reward_models.config import RewardConfig
from reward_models.curriculum import Curriculum
from reward_models.data import RewardData
from reward_models.evaluate import users_ranking
from reward_models.exposure import exposure_logloss
from reward_models.losses import StepWeights, dice_loss, discrepancy, exposure_pointwise
from reward_models.model import CausalEmbeddings, Tables, normalized_adjacency, popularity_buckets
from reward_models.profile.fit import link_init
from reward_models.selection import UNIFORM, choose, load_uniform_half
from reward_models.training.datamodule import fixed_sample, valid_sample
from reward_models.training.lazy_adam import LazyAdam, row_groups

VALID_METRICS = ("ndcg@10", "recall@10", "hit@10", "mrr@10")


def build_model(data: RewardData, cfg: RewardConfig) -> CausalEmbeddings:
    """The embedding model for ``data``, initialised from ``runtime.seed``."""
    m = cfg.model
    popular = m.disentangle and m.conformity in ("popularity", "scalar")
    adj = None
    if m.backbone == "lightgcn":
        adj = normalized_adjacency(data.train_user, data.train_item, data.n_users, data.n_items)
    return CausalEmbeddings(
        data.n_users,
        data.n_items,
        m.dim,
        backbone=m.backbone,
        n_layers=m.n_layers,
        disentangle=m.disentangle,
        adj=adj,
        init_std=m.init_std,
        generator=torch.Generator().manual_seed(cfg.runtime.seed),
        user_features=data.user_features.matrix if data.user_features is not None else None,
        item_features=data.item_features.matrix if data.item_features is not None else None,
        item_buckets=popularity_buckets(data.popularity, m.popularity_buckets) if popular else None,
        n_buckets=m.popularity_buckets,
        fixed_levels=m.conformity == "scalar",
    )


class RewardModule(pl.LightningModule):
    """Trains ``CausalEmbeddings`` on ``TripleStream`` batches; see the module docstring."""

    def __init__(
        self,
        data: RewardData,
        cfg: RewardConfig,
        profile: torch.Tensor | None = None,
        init: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """``profile``: stage-1 profiles z [n_users, D] that shape the user rows (``stage1.link``);
        ``init``: initial (user, item) id rows [n, nb * d] of a warm start (``reward_models.warmstart``)."""
        super().__init__()
        self.cfg, self.data = cfg, data
        self.model = build_model(data, cfg)
        link = cfg.stage1.link if cfg.stage1.enabled and profile is not None else "none"
        self.profile_map: torch.nn.Linear | None = None
        if link == "init":
            width, std = self.model.user.shape[1], cfg.model.init_std
            with torch.no_grad():
                self.model.user.copy_(link_init(profile, width, std, cfg.runtime.seed))
        elif link == "regularize":  # L2 pull of each user row towards a learned linear map of its profile
            self.register_buffer("profile", profile.float(), persistent=False)
            self.profile_map = torch.nn.Linear(profile.shape[1], self.model.user.shape[1])
        if init is not None:  # after the link: a warm start sets every row
            self.model.set_rows(*init)
        self.exposure_bias: torch.nn.Parameter | None = None
        if cfg.exposure.pointwise > 0 and data.exposure is not None and data.exposure.n_train > 0:
            # the pointwise log-loss's level, started at the log-odds of a positive among exposures
            odds = max(data.n_train, 1) / data.exposure.n_train
            self.exposure_bias = torch.nn.Parameter(torch.tensor(float(np.log(odds))))
        s, m = cfg.sampler, cfg.model
        self.curriculum = Curriculum(s.margin, s.margin_decay, m.weights.int, m.weights.con, s.loss_decay)
        self._val: dict[str, torch.Tensor] = {}
        self._item_click: torch.Tensor | None = None
        self._user_click: torch.Tensor | None = None
        self._seen_items = torch.from_numpy(data.seen_items())
        half = load_uniform_half(data) if cfg.train.select != "ndcg" else None
        self.selection = choose(cfg.train.select, data, half)
        # ranked at every evaluation only when it is the target, on the same fixed number of users
        # as the valid ranking (the 5M world's half holds 300k users: 25 s an evaluation)
        self.half = half if self.selection == UNIFORM else None
        if self.half is not None:
            self.half = replace(self.half, select_users=fixed_sample(self.half.select_users, cfg))
        # whose held-out impressions the log-loss scores: the users the valid ranking evaluates
        self._valid_users = valid_sample(data, cfg)
        self._epoch_loss: tuple[list[str], torch.Tensor] | None = None  # piece names, summed values
        self._epoch_steps = 0

    # -- training --------------------------------------------------------------------
    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        m = self.cfg.model
        user, pos, neg = batch["user"], batch["pos"], batch["neg"]
        su = si = None
        if self.model.disentangled and m.discrepancy != "none" and m.weights.disc > 0:
            su, si = batch.get("sub_user"), batch.get("sub_item")
            if su is None:  # dCor off in the stream (never for dcor): use the batch's own rows
                su, si = user, torch.cat([pos, neg])
        if self.model.backbone == "mf":  # compose only the rows this step reads: indices become positions
            n = user.shape[0]
            t, u_at, i_at = self.model.batch_tables(
                torch.cat([user] if su is None else [user, su]),
                torch.cat([pos, neg] if si is None else [pos, neg, si]),
            )
            user, pos, neg = u_at[:n], i_at[:n], i_at[n : 2 * n]
            if su is not None:
                su, si = u_at[n:], i_at[2 * n :]
        else:
            t = self.model.tables()
        reg = self.cfg.train.reg > 0
        scores = self.model(user, pos, neg, tables=t, sq_norm=reg)
        w_int, w_con = self.curriculum.weights_at(int(batch["epoch"]))
        disc = None
        if su is not None and si is not None:
            d = self.model.dim  # one gather per side; columns [0, d) interest, [d, 2d) conformity
            ur, ir = t.user_all.index_select(0, su), t.item_all.index_select(0, si)
            disc = discrepancy(m.discrepancy, [(ur[:, :d], ur[:, d:]), (ir[:, :d], ir[:, d:])])
        loss, pieces = dice_loss(
            scores,
            batch["neg_more_popular"],
            weights=StepWeights(w_int, w_con, m.weights.disc, self.cfg.train.reg),
            fallback=batch["fallback"],
            pos_weight=batch["pos_weight"],
            click_weight=batch.get("click_weight"),
            int_weight=batch["int_weight"],
            con_weight=batch["con_weight"],
            exposed=batch.get("exposed"),
            disc=disc,
            norm=float(batch["norm"]),
        )
        if self.exposure_bias is not None:
            imp = batch["impression"]
            clicked = self._click(t, user[~imp], pos[~imp])
            passed = self._click(t, user[imp], neg[imp])
            b = self.exposure_bias
            point = exposure_pointwise(clicked + b, passed + b, float(batch["norm"]))
            loss = loss + self.cfg.exposure.pointwise * point
            pieces["loss/exposure_pointwise"], pieces["loss"] = point.detach(), loss.detach()
        if self.profile_map is not None:
            link = ((t.user_all[user] - self.profile_map(self.profile[batch["user"]])) ** 2).sum(1).mean()
            loss = loss + self.cfg.stage1.link_weight * link
            pieces["link"], pieces["loss"] = link.detach(), loss.detach()
        # Summed as one tensor, read once per epoch: no per-step host sync or per-step logging.
        step = torch.stack(list(pieces.values()))
        self._epoch_loss = (list(pieces), step if self._epoch_loss is None else self._epoch_loss[1] + step)
        self._epoch_steps += 1
        if self.cfg.train.progress_bar:
            self.log("loss", pieces["loss"], prog_bar=True, logger=False, on_step=True, on_epoch=False)
        # Marked here, not in on_train_batch_end: callbacks (a step checkpoint) run before that hook.
        dm = self._trainer.datamodule if self._trainer is not None else None
        if dm is not None and getattr(dm, "stream", None) is not None:
            dm.stream.mark_consumed(int(batch["epoch"]), int(batch["index"]))
        return loss

    @staticmethod
    def _click(t: Tables, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        """click(u, i) [B] of index pairs user, item [B] (every branch summed)."""
        return (t.user_all.index_select(0, user) * t.item_all.index_select(0, item)).sum(1)

    def on_train_batch_end(self, outputs: Any, batch: dict[str, Any], batch_idx: int) -> None:
        if not torch.isfinite(outputs["loss"]):
            raise FloatingPointError(f"loss is {float(outputs['loss'])} at step {self.global_step}")

    def on_train_epoch_end(self) -> None:
        if self._epoch_steps and self._epoch_loss is not None:
            keys, sums = self._epoch_loss
            for k, v in zip(keys, (sums / self._epoch_steps).tolist(), strict=True):
                self.log(f"train/{k}", v, on_epoch=True, sync_dist=True)
            epoch = self.current_epoch
            self.log("train/margin", float(self.curriculum.margin_at(epoch)), sync_dist=True)
        self._epoch_loss, self._epoch_steps = None, 0

    def configure_optimizers(self) -> torch.optim.Optimizer:
        t = self.cfg.train
        if t.optimizer == "lazy_adam" and self.model.backbone == "mf":
            # sparse id-table gradients in one process; DDP's reducer all-reduces dense ones
            self.model.sparse_rows = self._trainer is None or self._trainer.world_size == 1
            groups = row_groups(self.parameters(), [self.model.user, self.model.item])
            return LazyAdam(groups, lr=t.lr, weight_decay=t.weight_decay)
        # fused: one kernel over all parameters (the foreach default is several passes per step)
        return torch.optim.Adam(self.parameters(), lr=t.lr, weight_decay=t.weight_decay, fused=True)

    # -- validation --------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        with torch.no_grad():
            t = self.model.tables()
            self._user_click, items = t.user_all, t.item_all  # [n, nb * d]: the click score
            # Never-trained items score as the readout scores them: the mean warm item.
            seen = self._seen_items.to(items.device)
            if bool(seen.any()) and not bool(seen.all()):
                items = torch.where(seen[:, None], items, items[seen].mean(0, keepdim=True))
            self._item_click = items
        self._val = {k: torch.zeros((), dtype=torch.float64) for k in (*VALID_METRICS, "n")}

    def validation_step(self, users: torch.Tensor, batch_idx: int) -> None:
        if users.numel() == 0:
            return
        u = users.cpu().numpy()
        scores = (self._user_click[users] @ self._item_click.T).float().cpu().numpy()
        topk = topk_from_scores(scores, 10, csr_rows(self.data.train, u))
        per_user = per_user_ranking_metrics(topk, csr_rows(self.data.valid, u), ks=(10,))
        for k in VALID_METRICS:
            self._val[k] += float(np.nansum(per_user[k]))
        self._val["n"] += float(u.size)

    def on_validation_epoch_end(self) -> None:
        sums = torch.stack([self._val[k] for k in (*VALID_METRICS, "n")]).to(self.device)
        sums = self.trainer.strategy.reduce(sums, reduce_op="sum") if self.trainer.world_size > 1 else sums
        n = max(float(sums[-1]), 1.0)
        for k, v in zip(VALID_METRICS, sums[:-1], strict=True):
            # identical on every rank after the reduction; sync_dist only silences Lightning's warning
            self.log(f"valid/{k}", float(v) / n, prog_bar=k == "ndcg@10", sync_dist=True)
        for k, v in self._selection_metrics().items():
            self.log(k, v, prog_bar=k == self.selection.monitor, sync_dist=True)
        self._user_click = self._item_click = None

    def _selection_metrics(self) -> dict[str, float]:
        """Held-out impression log-loss and the uniform half's NDCG@10, where the data has them."""
        user, item = self._user_click.float().cpu(), self._item_click.float().cpu()
        out = {}
        if self.data.exposure is not None:
            loss, pairs = exposure_logloss(user, item, self.data.valid, self.data.exposure, self._valid_users)
            if pairs:
                out["valid/exposure_logloss"] = loss
        if self.half is not None and self.half.select_users.size:
            h = self.half

            def pairs(u: np.ndarray, i: np.ndarray) -> np.ndarray:
                return (user[torch.from_numpy(u)] * item[torch.from_numpy(i)]).sum(1).numpy()

            r = users_ranking(pairs, self.data, h.truth, h.candidates, h.select_users, "half")
            out["valid/uniform_ndcg@10"] = r["half.ndcg@10"]
        return out

    # -- exact resume ---------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["parpo_rng"] = rng_state()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "parpo_rng" in checkpoint:
            set_rng_state(checkpoint["parpo_rng"])
