"""Training checkpoints: the policy, its optimisers, the anchors, the update counter and every RNG
state, so a resumed run continues exactly. Shared by both backends' trainers: the header that
says which backend and policy config wrote a checkpoint (``header``, ``check_header``), the
run's generators (``rng_states``, ``restore_rngs``) and the skill memory saved beside each
checkpoint (``memory_dir``, ``save_memory``, ``open_memory``, ``check_memory_clock``).

A run folder holds ``last.ckpt`` (every update) with its memory in ``memory/``, and with
``train.checkpoint_every`` N also ``update-<N>.ckpt`` with ``update-<N>.memory/``.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from parpo.algorithms import AnchorStore
from parpo.memory.policy_memory import MEMORY, PolicyMemory, load_policy_memory, save_policy_memory
from parpo_core.errors import DataError, UserError
from parpo_core.rng import rng_state, set_rng_state

LAST = "last.ckpt"


def numbered(run: Path, update: int) -> Path:
    """``update-<N>.ckpt`` in ``run``: the checkpoint kept every ``train.checkpoint_every`` updates."""
    return run / f"update-{update}.ckpt"


def header(backend: str, cfg: Any) -> dict[str, Any]:
    """What a checkpoint records of the run that wrote it: the backend and the policy config."""
    return {"backend": backend, "policy": cfg.policy.model_dump(mode="json")}


def read_checkpoint(path: Path, *, mmap: bool = False) -> dict[str, Any]:
    """The checkpoint at ``path`` as plain values (``torch.load(weights_only=True)``: no pickled
    objects); ``mmap``: tensors left on disk (to read the header alone). One line when it is not one."""
    if not path.is_file():
        raise UserError(
            f"{path}: no checkpoint here (resume from a run folder's last.ckpt or update-<N>.ckpt)"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except (RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as e:
        raise UserError(f"{path}: not a training checkpoint ({type(e).__name__})") from None


def _flat(d: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """Nested config values by dotted key (``policy.lora.r``)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}{k}.") if isinstance(v, Mapping) else {f"{prefix}{k}": v}
    return out


def check_header(path: Path, saved: Mapping[str, Any], want: Mapping[str, Any]) -> None:
    """One-line ``UserError`` unless the checkpoint ``saved`` (at ``path``) was written by the
    backend and policy config of ``want`` (``header``): its weights and optimiser states would not
    fit, or its episodes would differ. A native checkpoint from before headers is native, unchecked."""
    backend = saved.get("backend", "native")
    if backend != want["backend"]:
        raise UserError(
            f"{path}: a checkpoint of the {backend} policy backend, but this run trains the "
            f"{want['backend']} backend: resume it with --backend {backend} and the config it was trained with"
        )
    if "policy" not in saved:
        return
    was, now = _flat(saved["policy"], "policy."), _flat(want["policy"], "policy.")
    diff = [k for k in sorted(was.keys() | now.keys()) if was.get(k) != now.get(k)]
    if diff:
        named = ", ".join(f"{k} ({was.get(k)!r} there, {now.get(k)!r} here)" for k in diff[:3])
        more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
        raise UserError(
            f"{path}: the checkpoint's policy config differs from this run's: {named}{more}; "
            "resume with the config it was trained with"
        )


def rng_states(state: Mapping[str, Any]) -> dict[str, Any]:
    """The run's generators (``task_rng``: numpy, ``sample_gen`` and ``perm_gen``: torch) and the
    global ones (python, numpy, torch, and CUDA's once it is in use: dropout on a GPU) as plain values."""
    cuda = {"cuda": torch.cuda.get_rng_state_all()} if torch.cuda.is_initialized() else {}
    return {
        # PCG64's 128-bit state as decimal strings: plain values, no pickled objects.
        "task_rng": json.dumps(state["task_rng"].bit_generator.state),
        "sample_gen": state["sample_gen"].get_state(),
        "perm_gen": state["perm_gen"].get_state(),
        **rng_state(),
        **cuda,
    }


def restore_rngs(state: dict[str, Any], rng: Mapping[str, Any]) -> None:
    """Set ``state``'s generators and the global ones to what ``rng_states`` recorded."""
    state["task_rng"].bit_generator.state = json.loads(rng["task_rng"])
    state["sample_gen"].set_state(rng["sample_gen"])
    state["perm_gen"].set_state(rng["perm_gen"])
    set_rng_state(dict(rng))
    if "cuda" in rng and len(rng["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(rng["cuda"])


def save_checkpoint(
    fabric: Any,
    path: Path,
    module: Any,
    optimizers: list[Any],
    anchors: AnchorStore,
    state: dict[str, Any],
    head: Mapping[str, Any],
) -> None:
    """The native policy, optimisers, anchors, update counter and every RNG state (exact
    resume), under ``head`` (``header``)."""
    fabric.save(
        path,
        {
            **head,
            "model": module,
            **{f"optimizer{i}": o for i, o in enumerate(optimizers)},
            "anchors": anchors.state_dict(),
            "update": state["update"],
            "memory_clock0": state.get("memory_clock0", 0),
            "rng": rng_states(state),
        },
    )


def load_checkpoint(
    fabric: Any,
    path: Path,
    module: Any,
    optimizers: list[Any],
    anchors: AnchorStore,
    state: dict[str, Any],
) -> None:
    """Restore what ``save_checkpoint`` wrote into the live objects and ``state``."""
    ckpt: dict[str, Any] = {"model": module, **{f"optimizer{i}": o for i, o in enumerate(optimizers)}}
    rest = fabric.load(path, ckpt, strict=False)
    anchors.load_state_dict(rest["anchors"])
    state["update"] = int(rest["update"])
    # the memory's clock when the run started (a warm start carries its base's); older checkpoints
    # come from runs whose memory started empty
    state["memory_clock0"] = int(rest.get("memory_clock0", 0))
    restore_rngs(state, rest["rng"])


def memory_dir(checkpoint: Path) -> Path:
    """The memory saved with ``checkpoint``: ``<run>/memory`` for ``last.ckpt``,
    ``update-<N>.memory`` beside ``update-<N>.ckpt``."""
    return checkpoint.parent / MEMORY if checkpoint.name == LAST else checkpoint.with_suffix(".memory")


def open_memory(
    cfg: Any, user_index: Mapping[str, int], resume: Path | None, init: Path | None = None
) -> PolicyMemory:
    """The run's skill memory: the one saved with the checkpoint ``resume``, else the warm
    start's (``init``, a saved memory folder), else an empty one with ``cfg`` (``MemoryConfig``),
    on the reward model's ``user_index``."""
    from parpo.memory.graph import SkillGraph

    saved = memory_dir(resume) if resume is not None else None
    if saved is not None and saved.is_dir():
        return load_policy_memory(saved, user_index)
    if init is not None:
        return load_policy_memory(init, user_index)
    return PolicyMemory(SkillGraph(cfg), user_index)


def check_memory_clock(memory: PolicyMemory, checkpoint: Path, state: Mapping[str, Any]) -> None:
    """One-line ``DataError`` unless the memory's clock is its clock at the run's start (a warm
    start's base included, ``state["memory_clock0"]``) plus the checkpoint's updates: a crash
    between the two saves, or a checkpoint whose memory is missing, would otherwise resume from
    another memory than the one the run had."""
    clock, update = memory.graph.clock, state["update"]
    expected = state["memory_clock0"] + update
    if clock != expected:
        raise DataError(
            f"{memory_dir(checkpoint)}: the memory is at clock {clock} but the checkpoint (update "
            f"{update}) expects {expected}: resume from the checkpoint saved with this memory"
        )


def save_memory(memory: PolicyMemory, dest: Path) -> None:
    """The memory beside the checkpoint, replaced atomically (a resumed run reloads it)."""
    from parpo_core.durable import publish_dir, temp_sibling

    staging = temp_sibling(dest)
    save_policy_memory(memory, staging)
    publish_dir(staging, dest, replace=True)
