"""The LLM policy's critic: a value per token from a small head on the language model's last
hidden state, read through a stop-gradient, saved beside the model as ``value_head.safetensors``.

The value of the state before token ``j`` is the head on the hidden state at ``j - 1`` (the
position whose logits sample token ``j``), so one forward pass gives a generated token's
log-prob and its state's value. The head reads ``sg(h)``: a critic step never moves the language
model (or its LoRA adapters), so PACT's actor-then-critic order is exact, the critic's loss needs
no coefficient against the policy's, and a policy acts the same with or without its head. The
price: the critic cannot shape the representation it reads (as for the native policy's head).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

#: The head's weights in a policy folder (absent: a policy without a critic, e.g. saved before it).
FILE = "value_head.safetensors"


def value_head(hidden_size: int) -> Any:
    """``Linear(d, d) -> GELU -> Linear(d, 1)`` in float32 (the native head's shape)."""
    from torch import nn

    return nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.GELU(), nn.Linear(hidden_size, 1))


def token_values(head: Any, hidden: Tensor, sel: Tensor) -> Tensor:
    """``[B, L]`` float32: the value of the state before each token where ``sel`` [B, L] is set (0
    elsewhere and at ``j = 0``), from ``hidden`` [B, L, d] (the last hidden state), detached."""
    import torch

    s = sel[:, 1:]
    out = torch.zeros(sel.shape, dtype=torch.float32, device=hidden.device)
    out[:, 1:][s] = head(hidden[:, :-1][s].detach().float()).squeeze(-1)
    return out


def save(directory: str | Path, head: Any) -> None:
    """The head's weights into a policy folder (safetensors, no pickle)."""
    from safetensors.torch import save_file

    save_file(
        {k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}, str(Path(directory) / FILE)
    )


def load(directory: str | Path, hidden_size: int) -> Any:
    """The head of a policy folder; a folder whose config names a head but holds none is one line."""
    from safetensors.torch import load_file

    from parpo_core.errors import UserError

    path = Path(directory) / FILE
    if not path.is_file():
        raise UserError(f"{directory}: the llm policy's config has a value head but {FILE} is missing")
    head = value_head(hidden_size)
    head.load_state_dict(load_file(str(path)))
    return head
