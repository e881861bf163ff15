"""PARPO for the LLM backend: tasks -> G episodes per task (each one sample) -> reward components ->
``ADVANTAGES`` with the user anchors -> PPO epochs with ``LOSSES``/``AGGREGATIONS`` over the
generated tokens -> anchors. One process (CPU, or one GPU with bf16 and gradient checkpointing).

Behaviour log-probs: with ``loss.tis`` the trainer rescores the episodes before the update and
the token-level truncated importance weights ``pi_old / pi_engine`` correct for the engine's
mismatch (``parpo.algorithms.tis_weights``; Yao et al. 2025); without it the engine's log-probs
are the behaviour log-probs (the ``hf`` engine runs the trainer's own weights).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from parpo.algorithms import AnchorStore, build_optimizers, compute_advantages, compute_loss
from parpo.env.environment import PreferenceTransform
from parpo.env.source import EnvSource
from parpo.policy.llm.config import LLMTrainConfig, LLMTrainLoopConfig
from parpo.policy.llm.logprobs import pad_batch, token_logprobs
from parpo.policy.llm.policy import LLMPolicy
from parpo.policy.llm.rollout import collect
from parpo.trainer.loop import TrainResult, write_csv
from parpo.trainer.metrics import reward_metrics, rollout_report
from parpo_core.errors import DataError, UserError
from parpo_core.progress import step_progress


def _rows(batch: dict[str, Tensor], idx: Tensor, device: torch.device) -> dict[str, Tensor]:
    """Episodes ``idx`` of a padded batch, cut to their own longest length, on ``device``."""
    width = int(batch["attention"][idx].sum(1).max())
    return {k: v[idx][:, :width].to(device) for k, v in batch.items()}


@torch.no_grad()
def behaviour_logprobs(policy: LLMPolicy, batch: dict[str, Tensor], micro_batch_size: int) -> Tensor:
    """[E, L] the current weights' log-probs of the generated tokens (0 elsewhere)."""
    out = torch.zeros_like(batch["rollout_logp"])
    for idx in torch.arange(out.shape[0]).split(micro_batch_size):
        x = _rows(batch, idx, policy.device)
        allowed = policy.allowed_masks(x["ids"], x["mask"], x["mask"])
        logp, _ = token_logprobs(
            policy.model, x["ids"], x["attention"], x["mask"], policy.temperature, allowed
        )
        out[idx, : logp.shape[1]] = logp.cpu()
    return out


def episode_loss(policy: LLMPolicy, x: dict[str, Tensor], adv: Tensor, cfg: LLMTrainConfig,
                 n_tokens: Tensor, n_seqs: int) -> tuple[Tensor, dict[str, float]]:  # fmt: skip
    """``LOSSES[cfg.loss.name]`` of a micro-batch of episodes ``x`` (``_rows``; with ``old_logp``
    and, under TIS, ``is_weights``) with advantages ``adv`` [b], over their generated tokens."""
    allowed = policy.allowed_masks(x["ids"], x["mask"], x["mask"])
    logp, ent = token_logprobs(policy.model, x["ids"], x["attention"], x["mask"], policy.temperature, allowed)
    loss, metrics = compute_loss(
        logp, x["old_logp"], adv.to(logp.device), x["mask"], cfg.loss,
        is_weights=x.get("is_weights"), n_tokens=n_tokens, n_seqs=n_seqs,
    )  # fmt: skip
    metrics["entropy"] = float((ent.detach() * x["mask"]).sum() / x["mask"].sum().clamp(min=1))
    return loss, metrics


def ppo_update(policy: LLMPolicy, optimizers: Sequence[torch.optim.Optimizer], batch: dict[str, Tensor],
               adv: Tensor, cfg: LLMTrainConfig, perm_gen: torch.Generator) -> dict[str, float]:  # fmt: skip
    """``ppo_epochs`` x ``minibatches`` optimiser steps over the episodes of ``batch`` (``pad_batch``
    plus ``old_logp`` [E, L], and ``is_weights`` under TIS); returns ``actor/*`` means."""
    t: LLMTrainLoopConfig = cfg.train
    sums: dict[str, float] = {}
    steps = 0
    n = batch["ids"].shape[0]
    for _ in range(t.ppo_epochs):
        for mb in torch.randperm(n, generator=perm_gen).tensor_split(t.minibatches):
            if not mb.numel():
                continue
            n_tokens = batch["mask"][mb].sum().clamp(min=1).to(policy.device)
            lm: dict[str, float] = {}
            for chunk in mb.split(t.micro_batch_size):
                loss, m = episode_loss(policy, _rows(batch, chunk, policy.device), adv[chunk], cfg, n_tokens,
                                       mb.numel())  # fmt: skip
                loss.backward()
                m["loss"] = float(loss.detach())
                for k, v in m.items():  # the loss adds up over chunks; the rest: episode-weighted means
                    lm[k] = lm.get(k, 0.0) + v * (1.0 if k == "loss" else chunk.numel() / mb.numel())
            if t.max_grad_norm is not None:
                params = [p for p in policy.model.parameters() if p.requires_grad]
                lm["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, t.max_grad_norm))
            for opt in optimizers:
                opt.step()
                opt.zero_grad(set_to_none=True)
            for k, v in lm.items():
                sums[k] = sums.get(k, 0.0) + v
            steps += 1
    return {f"actor/{k}": v / max(steps, 1) for k, v in sums.items()}


def training_batch(policy: LLMPolicy, convs: Sequence[Any], cfg: LLMTrainConfig) -> dict[str, Tensor]:
    """``pad_batch`` of the episodes with their behaviour log-probs (and TIS weights)."""
    from parpo.algorithms import tis_weights

    batch = pad_batch(convs, policy.pad_id)
    if cfg.loss.tis:
        batch["old_logp"] = behaviour_logprobs(policy, batch, cfg.train.micro_batch_size)
        batch["is_weights"] = tis_weights(batch["old_logp"], batch["rollout_logp"], cfg.loss.tis_cap)
    else:
        batch["old_logp"] = batch["rollout_logp"]
    return batch


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class LLMTrainer:
    """``LLMTrainer(cfg, source, run_dir).fit()``: the LLM counterpart of ``PolicyTrainer``."""

    def __init__(self, cfg: LLMTrainConfig, source: EnvSource, run_dir: str | Path, *,
                 preference_transform: PreferenceTransform | None = None, init: Any = None) -> None:  # fmt: skip
        if init is not None:
            raise UserError("warm-starting an llm policy (retraining) is not supported yet; train it afresh")
        self.cfg, self.source, self.run = cfg, source, Path(run_dir)
        self.preference_transform = preference_transform

    def fit(self, resume: str | Path | None = None) -> TrainResult:
        if resume is not None:
            raise UserError("--resume is not supported for the llm backend yet; train it afresh")
        cfg, src = self.cfg, self.source
        if cfg.runtime.threads:
            torch.set_num_threads(cfg.runtime.threads)
        seed = cfg.runtime.seed
        torch.manual_seed(seed)
        policy = LLMPolicy.create(cfg.policy, src.reward_model, src.catalogue)
        policy.model.to(_device(cfg.runtime.device))
        optimizers = build_optimizers(policy.model, cfg.optim)
        anchors = AnchorStore.from_config(cfg.advantage)
        env = src.env(self.preference_transform)
        tasks = src.tasks("train")
        if not tasks:
            raise DataError(f"{src.dataset.root}: no training task in the reward version's split")
        memory = None
        if cfg.policy.memory_skills:  # the native loop's closed loop, skills shown as texts
            from parpo.memory.graph import SkillGraph
            from parpo.memory.policy_memory import PolicyMemory

            memory = policy.memory = PolicyMemory(SkillGraph(cfg.memory), src.reward_model.user_index)
        task_rng = np.random.default_rng(seed)
        sample_gen = torch.Generator().manual_seed(seed * 1009)
        perm_gen = torch.Generator().manual_seed(seed * 1013)
        logs = self.run / "logs" / "metrics.csv"
        history: list[dict[str, float]] = []
        t = cfg.train
        step = step_progress("llm policy updates", t.updates) if t.progress_bar else None
        for update in range(1, t.updates + 1):
            t0 = time.perf_counter()
            picks = task_rng.choice(
                len(tasks), size=t.tasks_per_update, replace=len(tasks) < t.tasks_per_update
            )
            policy.model.eval()
            eps = collect(policy, env, [tasks[i] for i in picks], t.group_size, src.reward_model.user_index,
                          generator=sample_gen)  # fmt: skip
            t1 = time.perf_counter()
            snap = anchors.snapshot()  # before this update's rewards move them: the write-back's thresholds
            adv, adv_metrics = compute_advantages(eps.rewards, eps.group, eps.user, snap, cfg.advantage)
            policy.model.train()
            batch = training_batch(policy, eps.convs, cfg)
            loss_metrics = ppo_update(policy, optimizers, batch, adv, cfg, perm_gen)
            policy.engine.sync(policy.model)
            anchor_metrics = anchors.update(eps.user, eps.rewards[cfg.advantage.preference_key])
            memory_metrics = {}
            if memory is not None:  # this update's episodes (the env's, in the episodes' order)
                memory_metrics = memory.write_back(
                    update, env.episodes, eps.infos, eps.user.tolist(),
                    eps.rewards[cfg.advantage.preference_key].tolist(),
                    {"preference": (snap.mean.numpy(), snap.count.numpy())},
                )  # fmt: skip
            t2 = time.perf_counter()
            generated = batch["mask"].sum(1).float()
            metrics = {
                **reward_metrics(eps.rewards),
                **rollout_report(eps.infos),
                **adv_metrics,
                **loss_metrics,
                **anchor_metrics,
                **memory_metrics,
                "llm/generated_tokens": float(generated.mean()),
                "llm/episode_tokens": float(batch["attention"].sum(1).float().mean()),
                "llm/cut_candidates": float(np.mean([c.cut for c in eps.convs])),
                "time/rollout_s": t1 - t0,
                "time/update_s": t2 - t1,
                "throughput/generated_tokens_per_s": float(generated.sum()) / max(t1 - t0, 1e-9),
                "update": update,
            }
            history.append({k: float(v) for k, v in metrics.items()})
            write_csv(history, logs)
            if step is not None:
                step(f"pref {metrics.get('reward/preference/mean', 0):.3f}  valid calls "
                     f"{metrics.get('reward/task/valid_calls/mean', 0):.3f}  no slate {metrics['report/no_slate']:.2f}")  # fmt: skip
        if step is not None:
            step(None)
        policy.model.eval()
        return TrainResult(policy, anchors, logs, history)  # type: ignore[arg-type]
