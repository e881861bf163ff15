"""The LLM trainer's checkpoints, on the native trainer's contract (``parpo.trainer.checkpoint``):
the trained weights (LoRA adapters, or the whole model under full fine-tuning, and the value head
when there is one), every optimiser's state, the anchors, the update counter, the memory's clock
at the run's start and every RNG state, under the header naming the backend and policy config.
One ``torch.save`` file of plain values (loaded with ``weights_only``), written atomically; the
base weights of a LoRA run are not repeated (``policy.model`` is read again on resume)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from parpo.algorithms import AnchorStore
from parpo.trainer.checkpoint import restore_rngs, rng_states
from parpo_core.errors import UserError


def trained_weights(params: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters the optimisers step (``requires_grad``), by name, on the CPU."""
    return {n: p.detach().cpu() for n, p in params.named_parameters() if p.requires_grad}


def save_llm_checkpoint(path: Path, params: torch.nn.Module, optimizers: Sequence[torch.optim.Optimizer],
                        anchors: AnchorStore, state: Mapping[str, Any], head: Mapping[str, Any]) -> None:  # fmt: skip
    """``params``' trained weights, ``optimizers``, ``anchors``, ``state``'s update counter,
    memory clock and generators (``rng_states``), under ``head`` (``header``)."""
    from parpo_core.durable import atomic_write_with

    ckpt = {
        **head,
        "model": trained_weights(params),
        "optimizers": [o.state_dict() for o in optimizers],
        "anchors": anchors.state_dict(),
        "update": int(state["update"]),
        "memory_clock0": int(state.get("memory_clock0", 0)),
        "rng": rng_states(state),
    }
    atomic_write_with(path, lambda tmp: torch.save(ckpt, tmp))


def load_llm_checkpoint(path: Path, saved: Mapping[str, Any], params: torch.nn.Module,
                        optimizers: Sequence[torch.optim.Optimizer], anchors: AnchorStore,
                        state: dict[str, Any]) -> None:  # fmt: skip
    """Restore ``saved`` (``read_checkpoint`` of ``path``, its header checked) into the live
    objects and ``state``. Weights that are not this run's trained ones: one line."""
    named = dict(params.named_parameters())
    want = {n for n, p in named.items() if p.requires_grad}
    if set(saved["model"]) != want or len(saved["optimizers"]) != len(optimizers):
        raise UserError(
            f"{path}: the checkpoint's trained weights are not this run's ({len(saved['model'])} tensors "
            f"there, {len(want)} here): resume with the config it was trained with"
        )
    with torch.no_grad():
        for n, t in saved["model"].items():
            named[n].copy_(t)
    for o, s in zip(optimizers, saved["optimizers"], strict=True):
        o.load_state_dict(s)
    anchors.load_state_dict(saved["anchors"])
    state["update"] = int(saved["update"])
    state["memory_clock0"] = int(saved["memory_clock0"])
    restore_rngs(state, saved["rng"])
