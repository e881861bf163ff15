"""Training checkpoints: the policy, its optimisers, the anchors, the update counter and every RNG
state, so a resumed run continues exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from parpo.algorithms import AnchorStore
from parpo_core.rng import rng_state, set_rng_state


def save_checkpoint(
    fabric: Any,
    path: Path,
    module: Any,
    optimizers: list[Any],
    anchors: AnchorStore,
    state: dict[str, Any],
) -> None:
    """The policy, optimisers, anchors, update counter and every RNG state (exact resume)."""
    fabric.save(
        path,
        {
            "model": module,
            **{f"optimizer{i}": o for i, o in enumerate(optimizers)},
            "anchors": anchors.state_dict(),
            "update": state["update"],
            "memory_clock0": state.get("memory_clock0", 0),
            "rng": {
                # PCG64's 128-bit state as decimal strings: plain values, no pickled objects.
                "task_rng": json.dumps(state["task_rng"].bit_generator.state),
                "sample_gen": state["sample_gen"].get_state(),
                "perm_gen": state["perm_gen"].get_state(),
                **rng_state(),
            },
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
    rng = rest["rng"]
    state["task_rng"].bit_generator.state = json.loads(rng["task_rng"])
    state["sample_gen"].set_state(rng["sample_gen"])
    state["perm_gen"].set_state(rng["perm_gen"])
    set_rng_state(rng)
