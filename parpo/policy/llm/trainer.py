"""PARPO for the LLM backend: tasks -> G episodes per task (each one sample) -> reward components
(+ clipped shaping penalties) -> advantages -> PPO epochs with ``LOSSES``/``AGGREGATIONS`` over the
generated tokens -> anchors. One process (CPU, or one GPU with bf16 and gradient checkpointing).

The advantage is group-relative (``ADVANTAGES`` with the user anchors) or value-based
(``VALUE_ESTIMATORS`` on the episodes' tokens, ``parpo.policy.llm.credit``): the policy's value
head (``parpo.policy.llm.value``) is then fitted on the same minibatches as the actor
(``train.order: joint``) or after the actor's epochs, on the episodes reweighted by the updated
actor's ratio (``actor_then_critic``).

Behaviour log-probs: with ``loss.tis`` the trainer rescores the episodes before the update and
the token-level truncated importance weights ``pi_old / pi_engine`` correct for the engine's
mismatch (``parpo.algorithms.tis_weights``; Yao et al. 2025); without it the engine's log-probs
are the behaviour log-probs (the ``hf`` engine runs the trainer's own weights).

Checkpoints (``last.ckpt`` every update, ``update-<N>.ckpt`` every ``train.checkpoint_every``,
each with its memory) follow the native trainer's contract (``parpo.policy.llm.checkpoint``), so
``fit(resume=...)`` continues exactly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from parpo.algorithms import (
    CRITIC_LOSSES,
    AnchorSnapshot,
    AnchorStore,
    build_optimizers,
    compute_advantages,
    compute_loss,
    pact_critic_weights,
    value_reward,
)
from parpo.algorithms.optim import CRITIC_PREFIX
from parpo.env.environment import PreferenceTransform
from parpo.env.source import EnvSource
from parpo.env.tasks import Task
from parpo.policy.llm.checkpoint import load_llm_checkpoint, save_llm_checkpoint
from parpo.policy.llm.config import LLMTrainConfig, LLMTrainLoopConfig
from parpo.policy.llm.credit import chain_mask, token_credit, turn_ids
from parpo.policy.llm.logprobs import forward, pad_batch, token_scores
from parpo.policy.llm.policy import LLMPolicy
from parpo.policy.llm.rollout import Episodes, collect
from parpo.policy.llm.sync import sync_engine
from parpo.policy.llm.value import token_values
from parpo.trainer.checkpoint import (
    LAST,
    check_header,
    check_memory_clock,
    header,
    memory_dir,
    numbered,
    open_memory,
    read_checkpoint,
    save_memory,
)
from parpo.trainer.loop import TrainResult, clip_apart, read_csv, write_csv
from parpo.trainer.metrics import reward_metrics, rollout_report
from parpo.trainer.rollout import shaping_components
from parpo.trainer.rollout_queue import Collect, RolloutQueue, SyncRollouts
from parpo_core.errors import DataError, UserError
from parpo_core.progress import step_progress


def _rows(batch: dict[str, Tensor], idx: Tensor, device: torch.device) -> dict[str, Tensor]:
    """Episodes ``idx`` of a padded batch, cut to their own longest length, on ``device``."""
    width = int(batch["attention"][idx].sum(1).max())
    return {k: v[idx][:, :width].to(device) for k, v in batch.items()}


def trainable(policy: LLMPolicy) -> torch.nn.Module:
    """What the optimisers step: the model, and with a value head both under one module whose
    head parameters are named ``value_head.*`` (``optim.critic_lr``, clipped apart)."""
    if policy.value_head is None:
        return policy.model
    return torch.nn.ModuleDict({"model": policy.model, CRITIC_PREFIX: policy.value_head})


@torch.no_grad()
def behaviour_scores(policy: LLMPolicy, batch: dict[str, Tensor], micro_batch_size: int,
                     value_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:  # fmt: skip
    """[E, L] the current weights' log-probs and entropies of the generated tokens (0 elsewhere)
    and, with ``value_mask`` [E, L], the value head's raw outputs there (None without)."""
    logp, ent = torch.zeros_like(batch["rollout_logp"]), torch.zeros_like(batch["rollout_logp"])
    values = None if value_mask is None else torch.zeros_like(logp)
    for idx in torch.arange(logp.shape[0]).split(micro_batch_size):
        x = _rows(batch, idx, policy.device)
        allowed = policy.allowed_masks(x["ids"], x["mask"], x["mask"])
        vm = None if value_mask is None else value_mask[idx][:, : x["ids"].shape[1]].to(policy.device)
        lp, e, v = token_scores(policy.model, x["ids"], x["attention"], x["mask"], policy.temperature,
                                allowed, policy.value_head if vm is not None else None, vm)  # fmt: skip
        logp[idx, : lp.shape[1]], ent[idx, : e.shape[1]] = lp.cpu(), e.cpu()
        if values is not None and v is not None:
            values[idx, : v.shape[1]] = v.cpu()
    return logp, ent, values


def head_values(policy: LLMPolicy, x: dict[str, Tensor], value_mask: Tensor) -> Tensor:
    """[b, L] the value head's raw outputs where ``value_mask`` [b, L] for the episodes ``x``
    (``_rows``): a forward without the vocabulary (no projection, log-softmax or constraint replay); the head
    reads a detached state, so its graph (if any) never reaches the model."""
    with torch.no_grad():
        hidden = forward(policy.model, x["ids"], x["attention"], hidden=True, keep=1).hidden_states[-1]
    return token_values(policy.value_head, hidden, value_mask)


@torch.no_grad()
def behaviour_values(policy: LLMPolicy, batch: dict[str, Tensor], micro_batch_size: int,
                     value_mask: Tensor) -> Tensor:  # fmt: skip
    """[E, L] the value head's raw outputs where ``value_mask`` [E, L] (0 elsewhere): what the
    critic needs when the behaviour log-probs are the engine's (``loss.tis`` off)."""
    values = torch.zeros_like(batch["rollout_logp"])
    for idx in torch.arange(values.shape[0]).split(micro_batch_size):
        x = _rows(batch, idx, policy.device)
        v = head_values(policy, x, value_mask[idx][:, : x["ids"].shape[1]].to(policy.device))
        values[idx, : v.shape[1]] = v.cpu()
    return values


def episode_loss(policy: LLMPolicy, x: dict[str, Tensor], adv: Tensor | None, cfg: LLMTrainConfig,
                 n_tokens: Tensor, n_seqs: int, n_values: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:  # fmt: skip
    """``LOSSES[cfg.loss.name]`` of a micro-batch of episodes ``x`` (``_rows``; with ``old_logp``,
    under TIS ``is_weights``, for ``turn_ratio`` ``turn``) with advantages ``adv`` [b] or [b, L],
    over their generated tokens (``adv`` None: no actor loss). With ``n_values`` (the minibatch's
    count of critic tokens) plus ``CRITIC_LOSSES[cfg.value.critic_loss]`` of the value head on
    ``x["target"]`` where ``x["value_mask"]`` (weighted by ``x["critic_weights"]`` if given)."""
    critic = n_values is not None
    metrics: dict[str, float] = {}
    loss = torch.zeros((), device=x["ids"].device)
    if adv is None:  # the critic alone: no graph through the model
        v = head_values(policy, x, x["value_mask"])
    else:
        allowed = policy.allowed_masks(x["ids"], x["mask"], x["mask"])
        logp, ent, v = token_scores(policy.model, x["ids"], x["attention"], x["mask"], policy.temperature, allowed,
                                    policy.value_head if critic else None, x.get("value_mask"))  # fmt: skip
        a = adv.to(logp.device)
        loss, metrics = compute_loss(
            logp, x["old_logp"], a[:, : logp.shape[1]] if a.ndim == 2 else a, x["mask"], cfg.loss,
            is_weights=x.get("is_weights"), n_tokens=n_tokens, n_seqs=n_seqs, turn=x.get("turn"),
        )  # fmt: skip
        metrics["loss"] = float(loss.detach())
        metrics["entropy"] = float((ent.detach() * x["mask"]).sum() / x["mask"].sum().clamp(min=1))
    if critic and v is not None:
        closs, cm = CRITIC_LOSSES[cfg.value.critic_loss](
            v, x["target"], x["value_mask"], weights=x.get("critic_weights"), n_tokens=n_values
        )
        loss, metrics = loss + closs, metrics | cm
    return loss, metrics


def ppo_update(policy: LLMPolicy, optimizers: Sequence[torch.optim.Optimizer], batch: dict[str, Tensor],
               adv: Tensor | None, cfg: LLMTrainConfig, perm_gen: torch.Generator, *, critic: bool = False,
               prefix: str = "actor/") -> dict[str, float]:  # fmt: skip
    """``ppo_epochs`` x ``minibatches`` optimiser steps over the episodes of ``batch`` (``pad_batch``
    plus ``old_logp`` [E, L], and ``is_weights`` under TIS); ``adv`` [E] or [E, L] (None: the
    critic alone); ``critic``: also fit the value head (``batch`` holds ``target`` and
    ``value_mask``). Returns ``<prefix>*`` means (``critic/*`` as they are)."""
    t: LLMTrainLoopConfig = cfg.train
    sums: dict[str, float] = {}
    steps = 0
    n = batch["ids"].shape[0]
    params = trainable(policy)
    for _ in range(t.ppo_epochs):
        for mb in torch.randperm(n, generator=perm_gen).tensor_split(t.minibatches):
            if not mb.numel():
                continue
            n_tokens = batch["mask"][mb].sum().clamp(min=1).to(policy.device)
            n_values = batch["value_mask"][mb].sum().clamp(min=1).to(policy.device) if critic else None
            lm: dict[str, float] = {}
            for chunk in mb.split(t.micro_batch_size):
                loss, m = episode_loss(policy, _rows(batch, chunk, policy.device),
                                       None if adv is None else adv[chunk], cfg, n_tokens, mb.numel(),
                                       n_values)  # fmt: skip
                loss.backward()
                for k, v in m.items():  # losses add up over chunks; the rest: episode-weighted means
                    share = 1.0 if k in ("loss", "critic/loss") else chunk.numel() / mb.numel()
                    lm[k] = lm.get(k, 0.0) + v * share
            if t.max_grad_norm is not None:
                lm |= clip_apart(params, t.max_grad_norm)
            for opt in optimizers:
                opt.step()
                opt.zero_grad(set_to_none=True)
            for k, v in lm.items():
                sums[k] = sums.get(k, 0.0) + v
            steps += 1
    return {(k if k.startswith("critic/") else prefix + k): v / max(steps, 1) for k, v in sums.items()}


def training_batch(policy: LLMPolicy, convs: Sequence[Any], cfg: LLMTrainConfig) -> dict[str, Tensor]:
    """``pad_batch`` of the episodes with their behaviour log-probs (and TIS weights); for
    ``turn_ratio`` the turn ids; with a value head the critic's values on the estimator's chain
    (``values``: ``sigmoid`` of the head for a BCE critic) and the tokens' entropies."""
    from parpo.algorithms import tis_weights

    batch = pad_batch(convs, policy.pad_id)
    value_mask = chain_mask(cfg.value.estimator, batch["mask"]) if cfg.value_based else None
    mbs = cfg.train.micro_batch_size
    # entropies only for turn_gae's entropy weights; log-probs only under TIS
    entropy = (
        value_mask is not None and cfg.value.estimator == "turn_gae" and cfg.value.token_weights == "entropy"
    )
    values = None
    if cfg.loss.tis or entropy:
        old, ent, values = behaviour_scores(policy, batch, mbs, value_mask)
        if entropy:
            batch["entropy"] = ent
    elif value_mask is not None:
        values = behaviour_values(policy, batch, mbs, value_mask)
    if values is not None:
        batch["values"] = torch.sigmoid(values) if cfg.value.critic_loss == "bce" else values
    if cfg.loss.tis:
        batch["old_logp"] = old
        batch["is_weights"] = tis_weights(batch["old_logp"], batch["rollout_logp"], cfg.loss.tis_cap)
    else:
        batch["old_logp"] = batch["rollout_logp"]
    if cfg.loss.name == "turn_ratio":
        batch["turn"] = turn_ids(batch["mask"])
    return batch


def episode_advantages(eps: Episodes, batch: dict[str, Tensor], snap: AnchorSnapshot,
               cfg: LLMTrainConfig) -> tuple[Tensor, dict[str, float]]:  # fmt: skip
    """The actor's advantages against the anchors ``snap``: [E] from ``ADVANTAGES``, or [E, L] from
    the critic's values (``token_credit``; then ``batch`` gains the critic's ``target`` and
    ``value_mask``)."""
    if not cfg.value_based:
        return compute_advantages(eps.rewards, eps.group, eps.user, snap, cfg.advantage)
    reward, metrics = value_reward(eps.rewards, eps.user, snap if cfg.value.anchored else None, cfg.advantage)
    credit, m = token_credit(reward, batch["values"], batch["mask"], batch.get("entropy"), cfg.value,
                             whiten_adv=cfg.advantage.whiten is not False)  # fmt: skip
    batch["target"], batch["value_mask"] = credit.target, credit.value_mask
    return credit.adv, metrics | m


def critic_after_actor(policy: LLMPolicy, optimizers: Sequence[torch.optim.Optimizer], batch: dict[str, Tensor],
                       cfg: LLMTrainConfig, perm_gen: torch.Generator) -> dict[str, float]:  # fmt: skip
    """PACT's second phase: the episodes rescored by the *updated* actor, the critic fitted with
    per-token weights ``pact_critic_weights`` (the ratio of the actor's tokens from each on)."""
    new_logp = behaviour_scores(policy, batch, cfg.train.micro_batch_size)[0]
    chain = chain_mask(cfg.value.estimator, batch["mask"])
    w = pact_critic_weights(new_logp, batch["old_logp"], chain, cfg.value.is_cap)
    out = ppo_update(policy, optimizers, batch | {"critic_weights": w}, None, cfg, perm_gen, critic=True,
                     prefix="critic/")  # fmt: skip
    vm = batch["value_mask"]
    out["critic/is_weight_mean"] = float(w[vm].mean())
    out["critic/is_weight_capped_frac"] = float((w[vm] >= cfg.value.is_cap).float().mean())
    return out


def _rollouts(policy: LLMPolicy, env: Any, tasks: Sequence[Task], user_index: dict[str, int],
              t: LLMTrainLoopConfig, state: dict[str, Any]) -> SyncRollouts | RolloutQueue:  # fmt: skip
    """Where each update's episodes come from: generated when the update starts, or under
    ``single_rollout`` by a replica of the policy in a background thread (``RolloutQueue``), up to
    ``max_staleness`` updates behind the trainer's weights."""

    def draw() -> list[Task]:
        picks = state["task_rng"].choice(
            len(tasks), size=t.tasks_per_update, replace=len(tasks) < t.tasks_per_update
        )
        return [tasks[i] for i in picks]

    def collect_with(p: LLMPolicy) -> Collect:
        def run(batch: Sequence[Task]) -> tuple[Episodes, list[Any]]:
            p.model.eval()
            return collect(
                p, env, batch, t.group_size, user_index, generator=state["sample_gen"]
            ), env.episodes

        return run

    if t.order != "single_rollout":
        return SyncRollouts(collect_with(policy), draw)
    replica = policy.replica()
    queue = RolloutQueue(collect_with(replica), replica.model.load_state_dict, draw, state["sample_gen"],
                         lag=t.max_staleness, first=state["update"], last=t.updates, task_rng=state["task_rng"])  # fmt: skip
    queue.publish(state["update"], policy.model)
    return queue


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass
class _Run:
    """What one ``fit`` carries from update to update."""

    policy: LLMPolicy
    params: torch.nn.Module
    optimizers: Sequence[torch.optim.Optimizer]
    anchors: AnchorStore
    rollouts: SyncRollouts | RolloutQueue
    state: dict[str, Any]  # generators, update count, memory clock: what a checkpoint resumes
    memory: Any
    head: dict[str, Any]  # the checkpoint header
    history: list[dict[str, float]]
    logs: Path


class LLMTrainer:
    """``LLMTrainer(cfg, source, run_dir).fit()``: the LLM counterpart of ``PolicyTrainer``."""

    def __init__(self, cfg: LLMTrainConfig, source: EnvSource, run_dir: str | Path, *,
                 preference_transform: PreferenceTransform | None = None, init: Any = None) -> None:  # fmt: skip
        if init is not None:
            raise UserError("warm-starting an llm policy (retraining) is not supported yet; train it afresh")
        self.cfg, self.source, self.run = cfg, source, Path(run_dir)
        self.preference_transform = preference_transform

    def fit(self, resume: str | Path | None = None) -> TrainResult:
        """Train ``train.updates`` updates; ``resume``: continue exactly from a checkpoint of this
        backend and policy config (``last.ckpt`` or ``update-<N>.ckpt``, with its memory)."""
        cfg, src = self.cfg, self.source
        head = header(LLMPolicy.kind, cfg)
        ckpt = None if resume is None else Path(resume)
        if ckpt is not None:  # another backend's or config's checkpoint: one line, before any work
            check_header(ckpt, read_checkpoint(ckpt, mmap=True), head)
        if cfg.runtime.threads:
            torch.set_num_threads(cfg.runtime.threads)
        seed = cfg.runtime.seed
        torch.manual_seed(seed)
        policy = LLMPolicy.create(cfg.policy, src.reward_model, src.catalogue)
        params = trainable(policy).to(_device(cfg.runtime.device))
        local_engine = policy.engine
        if cfg.rollout.workers:  # Ray workers generate; the env and the update stay here
            from parpo.policy.llm.workers import start_workers

            policy.engine = start_workers(policy, cfg)
        optimizers = build_optimizers(params, cfg.optim)
        anchors = AnchorStore.from_config(cfg.advantage)
        env = src.env(self.preference_transform)
        tasks = src.tasks("train")
        if not tasks:
            raise DataError(f"{src.dataset.root}: no training task in the reward version's split")
        memory = None
        if cfg.policy.memory_skills:  # the native loop's closed loop, skills shown as texts
            memory = policy.memory = open_memory(cfg.memory, src.reward_model.user_index, ckpt)
        state: dict[str, Any] = {
            "task_rng": np.random.default_rng(seed),
            "sample_gen": torch.Generator().manual_seed(seed * 1009),
            "perm_gen": torch.Generator().manual_seed(seed * 1013),
            "update": 0,
            "memory_clock0": memory.graph.clock if memory is not None else 0,
        }
        if ckpt is not None:
            load_llm_checkpoint(ckpt, read_checkpoint(ckpt), params, optimizers, anchors, state)
            # an engine with its own weights (vllm, Ray workers) takes the resumed ones, checked on the probe
            sync_engine(policy.engine, policy.model, policy.chat, cfg.rollout.probe_tolerance)
            if memory is not None:
                check_memory_clock(memory, ckpt, state)
        logs = self.run / "logs" / "metrics.csv"
        history: list[dict[str, float]] = read_csv(logs, state["update"]) if ckpt is not None else []
        t = cfg.train
        step = step_progress("llm policy updates", t.updates, state["update"]) if t.progress_bar else None
        rollouts = _rollouts(policy, env, tasks, src.reward_model.user_index, t, state)
        run = _Run(policy, params, optimizers, anchors, rollouts, state, memory, head, history, logs)
        try:
            for _ in range(state["update"], t.updates):
                self._one_update(run)
                metrics = history[-1]
                if step is not None:
                    step(f"pref {metrics.get('reward/preference/mean', 0):.3f}  valid calls "
                         f"{metrics.get('reward/task/valid_calls/mean', 0):.3f}  no slate {metrics['report/no_slate']:.2f}")  # fmt: skip
        finally:
            rollouts.close()
        if step is not None:
            step(None)
        if policy.engine is not local_engine:  # the trained policy acts in this process again
            policy.engine.close()
            policy.engine = local_engine
        params.eval()
        return TrainResult(policy, anchors, logs, history)  # type: ignore[arg-type]

    def _one_update(self, run: _Run) -> None:
        """Episodes -> advantages -> actor (and critic) epochs -> engine sync -> anchors -> memory
        write-back -> metrics (appended to ``run.history`` and ``run.logs``) -> checkpoint."""
        cfg, t = self.cfg, self.cfg.train
        policy, params, optimizers, anchors = run.policy, run.params, run.optimizers, run.anchors
        rollouts, state, memory = run.rollouts, run.state, run.memory
        update = state["update"] + 1
        batch_in = rollouts.next(state["update"])
        eps, perm_gen = batch_in.roll, state["perm_gen"]
        t1 = time.perf_counter()
        if cfg.shaping is not None:
            eps.rewards.update(shaping_components(eps.infos, cfg.shaping))
        snap = anchors.snapshot()  # before this update's rewards move them: the write-back's thresholds
        batch = training_batch(policy, eps.convs, cfg)  # the critic's values as the policy acted
        adv, adv_metrics = episode_advantages(eps, batch, snap, cfg)
        params.train()
        joint = cfg.value_based and t.order != "actor_then_critic"
        loss_metrics = ppo_update(policy, optimizers, batch, adv, cfg, perm_gen, critic=joint)
        if cfg.value_based and t.order == "actor_then_critic":
            params.eval()
            loss_metrics |= critic_after_actor(policy, optimizers, batch, cfg, perm_gen)
        sync_metrics = sync_engine(policy.engine, policy.model, policy.chat, cfg.rollout.probe_tolerance)
        anchor_metrics = anchors.update(eps.user, eps.rewards[cfg.advantage.preference_key])
        memory_metrics = {}
        if memory is not None:  # this update's episodes (the env's, in the episodes' order)
            memory_metrics = memory.write_back(
                update, batch_in.episodes, eps.infos, eps.user.tolist(),
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
            **sync_metrics,
            "llm/generated_tokens": float(generated.mean()),
            "llm/episode_tokens": float(batch["attention"].sum(1).float().mean()),
            "llm/cut_candidates": float(np.mean([c.cut for c in eps.convs])),
            "time/rollout_s": batch_in.collect_s,
            "time/update_s": t2 - t1,
            "throughput/generated_tokens_per_s": float(generated.sum()) / max(batch_in.collect_s, 1e-9),
            "update": update,
        }
        if t.order == "single_rollout":
            metrics["queue/staleness"] = state["update"] - batch_in.version
            metrics["queue/wait_s"] = batch_in.wait_s
        run.history.append({k: float(v) for k, v in metrics.items()})
        write_csv(run.history, run.logs)
        state["update"] = update
        rollouts.publish(update, policy.model)
        self._checkpoint(run, rollouts.checkpoint_state(state))

    def _checkpoint(self, run: _Run, state: dict[str, Any]) -> None:
        """``last.ckpt`` and its memory after every update; ``update-<N>.ckpt`` and its memory
        every ``train.checkpoint_every`` updates (the native trainer's files). ``state``: the
        run's, as the rollouts checkpoint it."""
        every = self.cfg.train.checkpoint_every
        kept = [self.run / LAST] + (
            [numbered(self.run, state["update"])] if every and state["update"] % every == 0 else []
        )
        for path in kept:
            save_llm_checkpoint(path, run.params, run.optimizers, run.anchors, state, run.head)
            if run.memory is not None:
                save_memory(run.memory, memory_dir(path))
