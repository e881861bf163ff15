"""The PARPO training loop on ``lightning_fabric``: tasks -> G rollouts per task -> reward
components (+ clipped shaping penalties) -> advantage -> PPO epochs -> anchors.

The advantage is group-relative (``ADVANTAGES``: parpo, gdpo, ...) or value-based
(``VALUE_ESTIMATORS``: gae, turn_gae, skip_obs_gae, pact; ``parpo.trainer.critic``): the policy's
value head is then fitted on the same minibatches as the actor (``train.order: joint``), after
the actor's epochs on the rollouts reweighted by the updated actor's ratio (``actor_then_critic``),
or as in ``joint`` with the rollouts collected in a background thread, a bounded number of updates
stale (``single_rollout``, ``parpo.trainer.rollout_queue``).

One process or DDP (``runtime.devices``): every rank draws the same global task sample (one
seeded generator), runs its shard's rollouts, computes advantages on its own groups (a task's
G rollouts never straddle ranks), and steps a DDP-synchronised optimiser over the same number
of minibatches; the anchors are updated from all-gathered per-user statistics, so they stay
identical on every rank. Checkpoints carry the policy, the optimiser, the anchors, the update
counter and every RNG state, so a resumed run continues exactly. With ``policy.memory_skills``
the skill graph memory (``parpo.memory``) feeds retrieved skills to the policy and takes every
rank's episodes after each update (``memory/*`` metrics); it is kept in ``<run>/memory`` beside
``last.ckpt`` and in ``update-<N>.memory`` beside ``update-<N>.ckpt``, and a resume reloads the one
of its checkpoint (``memory_dir``), so a resumed run retrieves and writes back exactly as an
uninterrupted one.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from parpo.algorithms import (
    CRITIC_LOSSES,
    AnchorStore,
    all_gather_user_batch_stats,
    build_optimizers,
    compute_advantages,
    compute_loss,
)
from parpo.algorithms.optim import CRITIC_PREFIX
from parpo.env.environment import PreferenceTransform
from parpo.env.source import EnvSource
from parpo.env.tasks import Task
from parpo.memory.policy_memory import MEMORY
from parpo.policy.native import NativePolicy
from parpo.trainer.checkpoint import (
    LAST,
    check_header,
    check_memory_clock,
    header,
    load_checkpoint,
    memory_dir,
    numbered,
    open_memory,
    read_checkpoint,
    save_checkpoint,
    save_memory,
)
from parpo.trainer.config import PolicyTrainConfig
from parpo.trainer.critic import CriticTargets, critic_weights, value_credit
from parpo.trainer.metrics import anchor_distribution, anchor_divergence, reward_metrics, rollout_report
from parpo.trainer.rollout import Rollouts, collect, shaping_components
from parpo.trainer.rollout_queue import Collect, RolloutQueue, SyncRollouts
from parpo_core.errors import DataError


@dataclass
class PolicyInit:
    """Where a warm-started run begins: the network's ``state`` (``NativeNet.state_dict`` for the
    new catalogue), the anchors' ``AnchorStore.state_dict`` (None: fresh anchors) and the skill
    memory's folder (``parpo.memory.store``; None: an empty memory), loaded on the new reward
    model's user map, which must extend the memory's."""

    state: dict[str, torch.Tensor]
    anchors: dict[str, Any] | None = None
    memory: Path | None = None


@dataclass
class TrainResult:
    policy: NativePolicy
    anchors: AnchorStore
    logs: Path
    history: list[dict[str, float]] = field(default_factory=list)
    is_global_zero: bool = True
    trackers: list[Any] = field(default_factory=list, repr=False)  # runtime.loggers beyond the CSV log


def _fabric(cfg: PolicyTrainConfig, run: Path) -> Any:
    from lightning_fabric import Fabric

    from parpo_core.trackers import trackers

    # the CSV log is the trainer's own (``write_csv``), always written
    loggers = trackers(cfg.runtime, run, "parpo-policy", cfg.model_dump(mode="json"))
    rt = cfg.runtime
    accelerator = "auto" if rt.device == "auto" else rt.device
    # The critic's phase of actor_then_critic leaves the policy's weights without gradients.
    ddp = "ddp_find_unused_parameters_true" if cfg.value_based else "ddp"
    strategy = ddp if rt.devices > 1 else "auto"
    return Fabric(accelerator=accelerator, devices=rt.devices, strategy=strategy, loggers=loggers)


def write_csv(history: list[dict[str, float]], path: Path) -> None:
    """All updates so far, one row each (columns: the union of keys), written atomically."""
    import polars as pl

    from parpo_core.durable import atomic_write_bytes

    path.parent.mkdir(parents=True, exist_ok=True)
    df = pl.DataFrame(history, infer_schema_length=None)
    atomic_write_bytes(path, df.select("update", pl.exclude("update")).write_csv().encode())


def read_csv(path: Path, upto: int) -> list[dict[str, float]]:
    """The rows of a previous run's log up to update ``upto`` (a resumed run continues it)."""
    import polars as pl

    if not path.is_file():
        return []
    df = pl.read_csv(path, infer_schema_length=None).filter(pl.col("update") <= upto)
    return [{k: v for k, v in row.items() if v is not None} for row in df.iter_rows(named=True)]


class PolicyTrainer:
    """``PolicyTrainer(cfg, source, run_dir).fit()``; ``source`` opens data, split and reward model."""

    def __init__(
        self,
        cfg: PolicyTrainConfig,
        source: EnvSource,
        run_dir: str | Path,
        *,
        preference_transform: PreferenceTransform | None = None,
        init: PolicyInit | None = None,
    ) -> None:
        self.cfg, self.source, self.run = cfg, source, Path(run_dir)
        self.preference_transform = preference_transform
        self.init = init

    def fit(self, resume: str | Path | None = None) -> TrainResult:
        cfg, src = self.cfg, self.source
        if resume is not None:  # a checkpoint of another backend or policy config: one line, before any work
            check_header(
                Path(resume), read_checkpoint(Path(resume), mmap=True), header(NativePolicy.kind, cfg)
            )
        if cfg.runtime.threads:
            torch.set_num_threads(cfg.runtime.threads)
        fabric = _fabric(cfg, self.run)
        fabric.launch()
        rank, world = fabric.global_rank, fabric.world_size
        seed = cfg.runtime.seed
        torch.manual_seed(seed)  # identical initial weights on every rank
        policy = NativePolicy.create(cfg.policy, src.reward_model, src.catalogue, cfg.env.search_k)
        if self.init is not None:  # a warm start (parpo.retrain.policy); a resume overrides it below
            policy.net.load_state_dict(self.init.state)
        module = fabric.setup_module(policy.net)
        if cfg.value_based:
            module.mark_forward_method("forward_value")
        optimizers = fabric.setup_optimizers(*build_optimizers(policy.net, cfg.optim))
        optimizers = list(optimizers) if isinstance(optimizers, tuple) else [optimizers]
        reference = copy.deepcopy(policy.net).requires_grad_(False) if cfg.loss.kl_beta > 0 else None
        memory = self._memory(policy, resume) if cfg.policy.memory_skills else None
        anchors = AnchorStore.from_config(cfg.advantage)
        if self.init is not None and self.init.anchors is not None:
            anchors.load_state_dict(self.init.anchors)
        env = src.env(self.preference_transform)
        tasks = src.tasks("train")
        if not tasks:
            meta = src.split.meta
            raise DataError(
                f"{src.dataset.root}: no training task: the train part of the {meta.get('name', '')} split "
                f"holds no positive interaction (positive events: "
                f"{', '.join(meta.get('rule', {}).get('events', [])) or 'none'}); log positive events "
                "or change the positives rule"
            )
        user_index = src.reward_model.user_index
        state = {
            "task_rng": np.random.default_rng(seed),
            "sample_gen": torch.Generator(device=fabric.device).manual_seed(seed * 1009 + rank),
            "perm_gen": torch.Generator().manual_seed(seed * 1013 + rank),
            "update": 0,
            "memory_clock0": memory.graph.clock if memory is not None else 0,
        }
        if resume is not None:
            load_checkpoint(fabric, Path(resume), module, optimizers, anchors, state)
            if memory is not None:
                check_memory_clock(memory, Path(resume), state)
        t = cfg.train
        logs = self.run / "logs" / "metrics.csv"
        history = read_csv(logs, state["update"]) if resume is not None else []
        bar = _bar(t.updates, state["update"], enabled=t.progress_bar and rank == 0)

        def draw() -> list[Task]:
            picks = state["task_rng"].choice(
                len(tasks), size=t.tasks_per_update, replace=len(tasks) < t.tasks_per_update
            )
            return [tasks[i] for i in picks[rank::world]]

        rollouts = self._rollouts(policy, env, draw, user_index, state)
        try:
            while state["update"] < t.updates:
                self._one_update(
                    fabric,
                    policy,
                    module,
                    optimizers,
                    reference,
                    anchors,
                    rollouts,
                    state,
                    history,
                    logs,
                    memory,
                )
                bar(history[-1])
        finally:
            rollouts.close()
        bar(None)
        for logger in fabric.loggers:
            logger.finalize("success")
        return TrainResult(policy, anchors, logs, history, fabric.is_global_zero, list(fabric.loggers))

    def _rollouts(
        self,
        policy: NativePolicy,
        env: Any,
        draw: Any,
        user_index: dict[str, int],
        state: dict[str, Any],
    ) -> SyncRollouts | RolloutQueue:
        t = self.cfg.train

        def collect_with(p: NativePolicy) -> Collect:
            def run(tasks: Sequence[Task]) -> tuple[Rollouts, list[Any]]:
                p.net.eval()
                roll = collect(p, env, tasks, t.group_size, user_index, generator=state["sample_gen"])
                return roll, env.episodes

            return run

        if t.order != "single_rollout":
            return SyncRollouts(collect_with(policy), draw)
        # The thread acts with its own copy of the network, loaded with each version it needs.
        replica = NativePolicy(copy.deepcopy(policy.net), policy.featurizer, policy.search_k)
        replica.net.requires_grad_(False)
        queue = RolloutQueue(
            collect_with(replica),
            replica.net.load_state_dict,
            draw,
            state["sample_gen"],
            lag=t.max_staleness,
            first=state["update"],
            last=t.updates,
            task_rng=state["task_rng"],
        )
        queue.publish(state["update"], policy.net)
        return queue

    def _one_update(
        self,
        fabric: Any,
        policy: NativePolicy,
        module: Any,
        optimizers: list[Any],
        reference: Any,
        anchors: AnchorStore,
        rollouts: SyncRollouts | RolloutQueue,
        state: dict[str, Any],
        history: list[dict[str, float]],
        logs: Path,
        memory: Any = None,
    ) -> None:
        """Rollouts -> advantages -> actor (and critic) epochs -> anchors -> memory write-back ->
        log -> checkpoint."""
        cfg, t = self.cfg, self.cfg.train
        world = fabric.world_size
        batch = rollouts.next(state["update"])
        roll = batch.roll
        policy.net.eval()  # the critic's values as the policy acts
        if cfg.shaping is not None:
            roll.rewards.update(shaping_components(roll.infos, cfg.shaping))
        t1 = time.perf_counter()
        critic = None
        snap = anchors.snapshot()  # before this update's rewards move them: the write-back's thresholds
        if cfg.value_based:
            sample_adv, adv_metrics, critic = value_credit(module, policy.temperature, roll, anchors, cfg)
        else:
            adv, adv_metrics = compute_advantages(roll.rewards, roll.group, roll.user, snap, cfg.advantage)
            sample_adv = adv.to(roll.tokens.device)[roll.episode]
        policy.net.train()
        joint = critic if t.order != "actor_then_critic" else None
        loss_metrics = self._update(
            fabric, policy, module, optimizers, reference, roll, sample_adv, state["perm_gen"], joint
        )
        if critic is not None and t.order == "actor_then_critic":
            loss_metrics |= self._critic_after_actor(
                fabric, policy, module, optimizers, roll, critic, state["perm_gen"]
            )
        anchor_metrics = anchors.update(
            roll.user,
            roll.rewards[cfg.advantage.preference_key],
            gather=all_gather_user_batch_stats if world > 1 else None,
        )
        memory_metrics = {}
        if memory is not None:  # the closed loop: this update's episodes into the memory
            memory_metrics = memory.write_back(
                state["update"],
                batch.episodes,
                roll.infos,
                roll.user.tolist(),
                roll.rewards[cfg.advantage.preference_key].tolist(),
                {"preference": (snap.mean.numpy(), snap.count.numpy())},
                gather=_all_gather_objects if world > 1 else None,
            )
        t2 = time.perf_counter()
        metrics = {
            **reward_metrics(roll.rewards),
            **rollout_report(roll.infos),
            **adv_metrics,
            **loss_metrics,
            **anchor_metrics,
            **anchor_distribution(anchors),
            **memory_metrics,
            "time/rollout_s": batch.collect_s,
            "time/update_s": t2 - t1,
            "throughput/env_steps_per_s": roll.n_samples / max(batch.collect_s, 1e-9),
        }
        if t.order == "single_rollout":
            metrics["queue/staleness"] = state["update"] - batch.version
            metrics["queue/wait_s"] = batch.wait_s
        metrics = {k: float(v) for k, v in metrics.items()}
        if world > 1:
            metrics["anchors/rank_divergence"] = anchor_divergence(fabric, anchors)
            if memory is not None:
                metrics["memory/rank_divergence"] = _memory_divergence(fabric, memory)
            metrics = {k: float(v) for k, v in fabric.all_reduce(metrics, reduce_op="mean").items()}
        state["update"] += 1
        rollouts.publish(state["update"], module)
        metrics["update"] = state["update"]
        fabric.log_dict(metrics, step=state["update"])
        history.append(metrics)
        if fabric.is_global_zero:
            write_csv(history, logs)
        ckpt = rollouts.checkpoint_state(state)
        head = header(policy.kind, cfg)
        save_checkpoint(fabric, self.run / LAST, module, optimizers, anchors, ckpt, head)
        if memory is not None and fabric.is_global_zero:
            save_memory(memory, self.run / MEMORY)
        if t.checkpoint_every and state["update"] % t.checkpoint_every == 0:
            kept = numbered(self.run, state["update"])
            save_checkpoint(fabric, kept, module, optimizers, anchors, ckpt, head)
            if memory is not None and fabric.is_global_zero:
                save_memory(memory, memory_dir(kept))

    def _critic_after_actor(
        self,
        fabric: Any,
        policy: NativePolicy,
        module: Any,
        optimizers: list[Any],
        roll: Rollouts,
        critic: CriticTargets,
        perm_gen: torch.Generator,
    ) -> dict[str, float]:
        """PACT's second phase: the critic fitted to the rollouts reweighted by the *updated*
        actor's importance ratio (``critic_weights``), so it tracks the policy that acts next."""
        policy.net.eval()
        with torch.no_grad():
            new_logp = module(roll.inputs, roll.tokens, policy.temperature)[0]
        policy.net.train()
        w = critic_weights(
            new_logp, roll.old_logp, roll.mask, roll.episode, len(roll.infos), self.cfg.value.is_cap
        )
        out = self._update(
            fabric,
            policy,
            module,
            optimizers,
            None,
            roll,
            None,
            perm_gen,
            replace(critic, weights=w),
            "critic/",
        )
        out["critic/is_weight_mean"] = float(w.mean())
        out["critic/is_weight_capped_frac"] = float((w >= self.cfg.value.is_cap).float().mean())
        return out

    def _update(
        self,
        fabric: Any,
        policy: NativePolicy,
        module: Any,
        optimizers: list[Any],
        reference: Any,
        roll: Rollouts,
        sample_adv: torch.Tensor | None,
        perm_gen: torch.Generator,
        critic: CriticTargets | None = None,
        prefix: str = "actor/",
    ) -> dict[str, float]:
        """``ppo_epochs`` passes over the rollouts in ``minibatches`` equal-count chunks per rank
        (every rank steps the same number of times, as DDP needs). ``sample_adv`` [N] or [N, T]:
        the actor's advantages (None: the critic only); ``critic``: also fit the value head."""
        cfg = self.cfg
        ref_logp = None
        if reference is not None:
            with torch.no_grad():
                ref_logp = reference(roll.inputs, roll.tokens, policy.temperature)[0]
        n_cand = roll.inputs["cand_mask"].sum(1)
        sums: dict[str, float] = {}
        n = 0
        for _ in range(cfg.train.ppo_epochs):
            perm = torch.randperm(roll.n_samples, generator=perm_gen).to(roll.tokens.device)
            for mb in torch.tensor_split(perm, cfg.train.minibatches):
                # Micro-batches of similar candidate counts pad less; the aggregation divides by
                # the whole minibatch's counts, so their summed gradients are the minibatch's.
                mb = mb[torch.argsort(n_cand[mb], stable=True)]
                n_tokens = roll.mask[mb].sum().clamp(min=1)
                chunks = [c for c in torch.tensor_split(mb, cfg.train.micro_batches) if c.numel()]
                lm: dict[str, float] = {}
                for j, c in enumerate(chunks):
                    with fabric.no_backward_sync(module, enabled=j < len(chunks) - 1):
                        part = self._loss(
                            fabric,
                            module,
                            policy,
                            roll,
                            c,
                            sample_adv,
                            ref_logp,
                            n_tokens,
                            mb.numel(),
                            critic,
                        )
                    for k, v in part.items():  # losses add up; other metrics: sample-weighted mean
                        share = 1.0 if k in ("loss", "critic/loss") else c.numel() / mb.numel()
                        lm[k] = lm.get(k, 0.0) + v * share
                if cfg.train.max_grad_norm is not None and cfg.value_based:
                    lm |= clip_apart(module, cfg.train.max_grad_norm)
                elif cfg.train.max_grad_norm is not None:
                    for opt in optimizers:
                        lm["grad_norm"] = float(
                            fabric.clip_gradients(module, opt, max_norm=cfg.train.max_grad_norm)
                        )
                for opt in optimizers:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                for k, v in lm.items():
                    sums[k] = sums.get(k, 0.0) + float(v)
                n += 1
        return {(k if k.startswith("critic/") else prefix + k): v / max(n, 1) for k, v in sums.items()}

    def _loss(
        self,
        fabric: Any,
        module: Any,
        policy: NativePolicy,
        roll: Rollouts,
        idx: torch.Tensor,
        sample_adv: torch.Tensor | None,
        ref_logp: torch.Tensor | None,
        n_tokens: torch.Tensor,
        n_seqs: int,
        critic: CriticTargets | None = None,
    ) -> dict[str, float]:
        """Backward of one micro-batch's share of the minibatch loss (actor, critic or both); its metrics."""
        x = {k: v[idx] for k, v in roll.inputs.items()}
        mask = roll.mask[idx]
        lm: dict[str, float] = {}
        loss = torch.zeros((), device=mask.device)
        if critic is not None:
            logp, ent, _, v = module.forward_value(x, roll.tokens[idx], policy.temperature)
            w = None if critic.weights is None else critic.weights[idx].unsqueeze(-1)
            closs, cm = CRITIC_LOSSES[critic.loss](
                v.unsqueeze(-1),
                critic.target[idx].unsqueeze(-1),
                torch.ones_like(v, dtype=torch.bool).unsqueeze(-1),
                weights=w,
                n_tokens=n_seqs,
            )
            loss, lm = loss + closs, lm | cm
        else:
            logp, ent, _ = module(x, roll.tokens[idx], policy.temperature)
        if sample_adv is not None:
            ploss, pm = compute_loss(
                logp,
                roll.old_logp[idx],
                sample_adv[idx],
                mask,
                self.cfg.loss,
                ref_logp=None if ref_logp is None else ref_logp[idx],
                n_tokens=n_tokens,
                n_seqs=n_seqs,
            )
            loss, lm = loss + ploss, lm | pm
            lm["loss"] = float(ploss.detach())
            lm["entropy"] = float((ent.detach() * mask).sum() / mask.sum().clamp(min=1))
        fabric.backward(loss)
        return {k: float(v) for k, v in lm.items()}

    def _memory(self, policy: NativePolicy, resume: str | Path | None) -> Any:
        """The run's skill memory (``open_memory``: resuming, the warm start's, or a fresh one),
        fed to the policy."""
        init = self.init.memory if self.init is not None else None
        index = self.source.reward_model.user_index
        memory = open_memory(self.cfg.memory, index, None if resume is None else Path(resume), init)
        policy.featurizer.memory = memory
        return memory


def clip_apart(module: Any, max_norm: float) -> dict[str, float]:
    """Clip the policy's and the value head's gradients each to ``max_norm``: a large critic
    gradient must not shrink the actor's step (one joint norm would couple them)."""
    named = list(module.named_parameters())
    actor = [p for n, p in named if not _is_critic(n) and p.grad is not None]
    critic = [p for n, p in named if _is_critic(n) and p.grad is not None]
    out = {}
    if actor:
        out["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(actor, max_norm))
    if critic:
        out["critic/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(critic, max_norm))
    return out


def _all_gather_objects(items: list[Any]) -> list[Any]:
    """Every rank's ``items`` concatenated in rank order (a collective call)."""
    import torch.distributed as dist

    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, items)
    return [x for part in parts for x in part]


def _memory_divergence(fabric: Any, memory: Any) -> float:
    """Largest difference between ranks of a digest of the memory (0 when they agree, as they must)."""
    g = memory.graph
    live = g.skills.live()
    digest = torch.tensor(
        [
            float(len(g)),
            float(g.skills.next_sid),
            float(g.skills.count[live].sum()),
            float(g.skills.support[live].sum()),
            float(sum(sum(row.values()) for row in g.user_skill.values())),
        ],
        dtype=torch.float64,
        device=fabric.device,
    )
    every = fabric.all_gather(digest)
    return float((every - every[0]).abs().max())


def _is_critic(name: str) -> bool:
    return f".{CRITIC_PREFIX}." in f".{name}"  # Fabric's wrapper may prefix the names


def _bar(total: int, start: int, *, enabled: bool) -> Any:
    """``advance(metrics)`` per update, ``advance(None)`` to close; a no-op when disabled."""
    if not enabled:
        return lambda _m: None
    from parpo_core.progress import step_progress

    step = step_progress("policy updates", total, start)

    def advance(m: dict[str, float] | None) -> None:
        step(
            None
            if m is None
            else f"pref {m.get('reward/preference/mean', 0):.3f}  task {m.get('report/task_quality', 0):.3f}  "
            f"hit@10 {m.get('report/hit@10', 0):.3f}"
        )

    return advance
