"""``fit``: train the stage-2 reward model with a Lightning Trainer (one process or DDP).

Early stopping and best-evaluation selection watch the module's ``selection``
(``reward_models.selection``: held-out impression log-loss, the uniform half's NDCG@10 or
valid NDCG@10). Evaluations run every ``train.eval_every_steps`` optimiser steps when set
(a fixed count: a run is reproducible), else every ``train.eval_every`` epochs.
``RUN/checkpoints/last.ckpt`` is written after every evaluation (and
``step-<N>.ckpt`` every ``train.checkpoint_every_n_steps`` steps, mid-epoch too);
each resumes exactly (``fit(..., resume=path)``); ``RUN/logs/metrics.csv`` holds the
epoch logs (TensorBoard logs beside it when ``tensorboard`` is installed).
Under DDP (``runtime.devices > 1``) Lightning re-runs the launching command once
per extra rank; only rank 0 gets ``is_global_zero`` and should publish.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Callback, EarlyStopping, ModelCheckpoint, ProgressBar
from pytorch_lightning.loggers import CSVLogger

from reward_models.config import RewardConfig
from reward_models.data import RewardData
from reward_models.selection import NDCG, Selection
from reward_models.training.datamodule import RewardDataModule
from reward_models.training.module import RewardModule

ACCELERATORS = {"auto": "auto", "cpu": "cpu", "cuda": "gpu", "mps": "mps"}


class _NoAdverts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage().lower()


def _quiet_lightning() -> None:
    """Drop Lightning's advert line and a deprecation warning raised inside Lightning itself."""
    logger = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    if not any(isinstance(f, _NoAdverts) for f in logger.filters):
        logger.addFilter(_NoAdverts())
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")


@dataclass
class FitResult:
    """What training produced. ``tables``: the scored vectors to publish (best valid epoch
    when ``train.restore_best``), as ``CausalEmbeddings.export`` names them."""

    tables: dict[str, torch.Tensor]
    is_global_zero: bool
    best_score: float | None
    best_epoch: int | None
    best_step: int | None
    selection: Selection
    epochs: int
    steps: int
    train_seconds: float
    train_cpu_seconds: float  # process CPU time (every thread): less disturbed by other jobs than wall time
    triples: int
    valid_seconds: float  # wall time of the evaluations during training
    evaluations: int
    run_dir: Path
    logs: Path | None
    checkpoint: Path | None
    module: RewardModule = field(repr=False)
    trackers: list[Any] = field(default_factory=list, repr=False)  # runtime.loggers beyond the CSV log

    @property
    def triples_per_s(self) -> float:
        return self.triples / self.train_seconds if self.train_seconds > 0 else float("nan")

    def summary(self) -> dict[str, Any]:
        return {
            "best_epoch": self.best_epoch,
            "best_step": self.best_step,
            "selection": {"target": self.selection.target, "metric": self.selection.monitor},
            f"best_{self.selection.monitor.replace('/', '_')}": self.best_score,
            "epochs": self.epochs,
            "steps": self.steps,
            "train_seconds": round(self.train_seconds, 3),
            "train_triples_per_s": round(self.triples_per_s, 1),
            "valid_seconds": round(self.valid_seconds, 3),
            "evaluations": self.evaluations,
        }


class BestWeights(Callback):
    """Keeps the exported tables of the best evaluation (in memory and in checkpoints)."""

    def __init__(self, selection: Selection = NDCG) -> None:
        self.monitor, self.sign = selection.monitor, 1.0 if selection.mode == "max" else -1.0
        self.best: float = -math.inf  # sign * metric: larger is better
        self.epoch: int | None = None
        self.step: int | None = None
        self.tables: dict[str, torch.Tensor] | None = None

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        v = trainer.callback_metrics.get(self.monitor)
        if v is None or trainer.sanity_checking:
            return
        v = self.sign * float(v)
        if math.isfinite(v) and v > self.best:
            self.best, self.epoch, self.step = v, trainer.current_epoch, trainer.global_step
            self.tables = pl_module.model.export()

    @property
    def best_value(self) -> float | None:
        """The best evaluation's metric (None before any)."""
        return self.sign * self.best if self.tables is not None else None

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "epoch": self.epoch, "step": self.step, "tables": self.tables}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.epoch, self.tables = state["best"], state["epoch"], state["tables"]
        self.step = state.get("step")  # checkpoints written before steps were kept


class Throughput(Callback):
    """Training time without validation (wall and process CPU), triples trained (all ranks
    together), and the evaluations' count and wall time."""

    def __init__(self) -> None:
        self.seconds, self.cpu_seconds, self.triples = 0.0, 0.0, 0
        self.valid_seconds, self.evaluations = 0.0, 0
        self._t0: tuple[float, float] | None = None
        self._v0: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._t0 is None:
            self._t0 = (time.perf_counter(), time.process_time())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.triples += round(float(batch["norm"]) * trainer.world_size)

    def on_validation_start(self, trainer, pl_module) -> None:
        self._stop()
        self._v0 = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._v0 is not None:
            self.valid_seconds += time.perf_counter() - self._v0
            self.evaluations += 1
            self._v0 = None

    def on_train_end(self, trainer, pl_module) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._t0 is not None:
            self.seconds += time.perf_counter() - self._t0[0]
            self.cpu_seconds += time.process_time() - self._t0[1]
            self._t0 = None


class StepBar(ProgressBar):
    """The project's one progress style (``parpo_core.progress``) for Lightning: a line (or a bar
    update on a terminal) per validation, with the train loss and the selection metric."""

    def __init__(self, monitor: str) -> None:
        super().__init__()
        self.monitor, self.on = monitor, True
        self._advance: Any = None

    def disable(self) -> None:
        self.on = False

    def enable(self) -> None:
        self.on = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from parpo_core.progress import step_progress

        if self.on and trainer.is_global_zero:
            self._advance = step_progress("reward evaluations", None)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._advance is None or trainer.sanity_checking:
            return
        m = trainer.callback_metrics
        shown = [k for k in ("loss", self.monitor) if k in m]
        info = "  ".join(f"{k} {float(m[k]):.4f}" for k in shown)
        self._advance(f"step {trainer.global_step}  epoch {trainer.current_epoch}  {info}")

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._advance is not None:
            self._advance(None)
            self._advance = None


def _loggers(cfg: RewardConfig, run_dir: Path) -> list[Any]:
    """The CSV log (always: the registry and the report read it) and the trackers of ``runtime.loggers``."""
    from parpo_core.trackers import trackers

    csv = CSVLogger(save_dir=str(run_dir), name="logs", version="")
    return [csv, *trackers(cfg.runtime, run_dir, "parpo-reward", cfg.model_dump(mode="json"))]


def make_trainer(
    cfg: RewardConfig, run_dir: Path, callbacks: list[Callback], selection: Selection = NDCG, n_train: int = 0
) -> pl.Trainer:
    """``n_train``: the train positives, which ``train.eval_every_steps: auto`` follows."""
    r, t = cfg.runtime, cfg.train
    every = t.eval_steps_for(n_train)
    accelerator = ACCELERATORS[r.device]
    strategy: Any = "auto"
    if r.devices > 1:
        from pytorch_lightning.strategies import DDPStrategy

        cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
        strategy = DDPStrategy(process_group_backend="gloo" if cpu else None)
    cbs = list(callbacks)
    if t.progress_bar:
        cbs.append(StepBar(selection.monitor))
    if t.early_stopping:
        mon, mode = selection.monitor, selection.mode
        cbs.append(EarlyStopping(monitor=mon, mode=mode, patience=t.patience, check_finite=True))
    if t.checkpoint and t.checkpoint_every_n_steps:
        cbs.append(  # mid-epoch resume points: checkpoints/step-<N>.ckpt
            ModelCheckpoint(
                dirpath=str(run_dir / "checkpoints"),
                filename="step-{step}",
                every_n_train_steps=t.checkpoint_every_n_steps,
                save_top_k=-1,
                enable_version_counter=False,
                auto_insert_metric_name=False,
            )
        )
    if t.checkpoint:
        cbs.append(
            ModelCheckpoint(
                dirpath=str(run_dir / "checkpoints"),
                save_last=True,
                save_top_k=0,
                enable_version_counter=False,
            )
        )
    return pl.Trainer(
        accelerator=accelerator,
        devices=r.devices,
        strategy=strategy,
        max_epochs=t.epochs,
        max_steps=t.max_steps,
        check_val_every_n_epoch=None if every else t.eval_every,
        val_check_interval=every or None,
        num_sanity_val_steps=0,
        logger=_loggers(cfg, run_dir),
        callbacks=cbs,
        enable_progress_bar=t.progress_bar,
        enable_model_summary=False,
        log_every_n_steps=1,  # nothing is logged per step to the loggers (epoch means only)
        use_distributed_sampler=False,
        default_root_dir=str(run_dir),
    )


def fit(
    cfg: RewardConfig,
    data: RewardData,
    run_dir: str | Path,
    *,
    resume: str | Path | None = None,
    profile: torch.Tensor | None = None,
    init: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> FitResult:
    """Train on ``data`` (a split) with ``cfg``; logs and checkpoints under ``run_dir``.

    ``resume``: a checkpoint (``RUN/checkpoints/last.ckpt``) to continue from exactly.
    ``profile``: stage-1 profiles z [n_users, D] for the ``stage1.link`` (None: no link).
    ``init``: a warm start's initial (user, item) rows (``reward_models.warmstart``).
    """
    run_dir = Path(run_dir)
    _quiet_lightning()
    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    pl.seed_everything(cfg.runtime.seed, workers=False, verbose=False)
    module = RewardModule(data, cfg, profile, init)
    dm = RewardDataModule(data, cfg)
    best, speed = BestWeights(module.selection), Throughput()
    trainer = make_trainer(cfg, run_dir, [best, speed], module.selection, data.n_train)
    trainer.fit(module, datamodule=dm, ckpt_path=str(resume) if resume else None)
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    use_best = cfg.train.restore_best and best.tables is not None
    tables = best.tables if use_best else module.model.export()
    logs = run_dir / "logs" / "metrics.csv"
    return FitResult(
        tables=tables,
        is_global_zero=trainer.is_global_zero,
        best_score=best.best_value,
        best_epoch=best.epoch,
        best_step=best.step,
        selection=module.selection,
        epochs=trainer.current_epoch,
        steps=trainer.global_step,
        train_seconds=speed.seconds,
        train_cpu_seconds=speed.cpu_seconds,
        triples=speed.triples,
        valid_seconds=speed.valid_seconds,
        evaluations=speed.evaluations,
        run_dir=run_dir,
        logs=logs if logs.is_file() else None,
        checkpoint=ckpt if ckpt.is_file() else None,
        module=module,
        trackers=[lg for lg in trainer.loggers if not isinstance(lg, CSVLogger)],
    )
