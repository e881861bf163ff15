"""Global RNG states (python, numpy, torch) as values ``torch.load(weights_only=True)`` accepts,
so checkpoints resume exactly without pickles."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    """Python, numpy and torch global RNG states as weights_only-loadable values."""
    np_state = np.random.get_state(legacy=False)
    return {
        "python": list(random.getstate()[1]),
        "python_gauss": random.getstate()[2],
        "numpy_key": torch.from_numpy(np.asarray(np_state["state"]["key"], dtype=np.int64)),
        "numpy_pos": int(np_state["state"]["pos"]),
        "numpy_gauss": [int(np_state["has_gauss"]), float(np_state["gauss"])],
        "torch": torch.get_rng_state(),
    }


def set_rng_state(s: dict[str, Any]) -> None:
    random.setstate((3, tuple(int(x) for x in s["python"]), s["python_gauss"]))
    np.random.set_state(
        {
            "bit_generator": "MT19937",
            "state": {"key": s["numpy_key"].numpy().astype(np.uint32), "pos": int(s["numpy_pos"])},
            "has_gauss": int(s["numpy_gauss"][0]),
            "gauss": float(s["numpy_gauss"][1]),
        }
    )
    torch.set_rng_state(s["torch"])
