"""The trainer's view of episodes: padded token batches and the log-prob of every token under the
current weights (differentiable). Only generated tokens are masked in; the optimiser never sees
prompt or tool-result tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from parpo.policy.llm.conversation import Conversation


def pad_batch(convs: Sequence[Conversation], pad_id: int) -> dict[str, Tensor]:
    """Right-padded episodes: ``ids`` [B, L] int64, ``attention`` [B, L] int64, ``mask`` [B, L] bool
    (generated tokens), ``rollout_logp`` [B, L] float32 (the engine's, 0 off the mask)."""
    width = max(len(c.ids) for c in convs)
    b = len(convs)
    ids = torch.full((b, width), pad_id, dtype=torch.int64)
    attn = torch.zeros((b, width), dtype=torch.int64)
    mask = torch.zeros((b, width), dtype=torch.bool)
    logp = torch.zeros((b, width), dtype=torch.float32)
    for i, c in enumerate(convs):
        n = len(c.ids)
        ids[i, :n] = torch.tensor(c.ids, dtype=torch.int64)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(c.mask, dtype=torch.bool)
        logp[i, :n] = torch.tensor(c.logp, dtype=torch.float32)
    return {"ids": ids, "attention": attn, "mask": mask, "rollout_logp": logp}


def token_logprobs(model: Any, ids: Tensor, attention: Tensor, mask: Tensor, temperature: float,
                   allowed: Tensor | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """``logp`` [B, L]: log p(ids[:, j] | ids[:, <j]) at ``temperature`` where ``mask`` [B, L] is
    set (0 elsewhere, and at j = 0), and the entropies [B, L] of those next-token distributions,
    both float32. Only masked positions reach the vocabulary-wide softmax (its memory is the
    generated tokens', not the prompts'). ``allowed`` [N, V] bool (N masked positions j >= 1,
    row-major): constrained decoding's masks, so the distribution is the one sampled from.

    Positions count attended tokens only (as ``generate`` does with left padding), so the values
    do not depend on how a batch was padded."""
    logp, ent, _ = token_scores(model, ids, attention, mask, temperature, allowed)
    return logp, ent


def forward(model: Any, ids: Tensor, attention: Tensor, hidden: bool = False, keep: int | Tensor = 0) -> Any:
    """The model's output on right-padded ``ids`` with positions counting attended tokens only;
    ``hidden``: with the hidden states (the value head reads the last); ``keep``: the positions
    projected onto the vocabulary (``logits_to_keep``: 0 all, an int the last ones, a 1-D tensor
    those positions of every row; the projection of every position of a long episode costs as
    much as a third of the model's forward)."""
    pos = (attention.cumsum(-1) - 1).clamp(min=0)
    return model(
        input_ids=ids,
        attention_mask=attention,
        position_ids=pos,
        output_hidden_states=hidden,
        logits_to_keep=keep,
    )


def token_scores(model: Any, ids: Tensor, attention: Tensor, mask: Tensor, temperature: float,
                 allowed: Tensor | None = None, value_head: Any = None,
                 value_mask: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:  # fmt: skip
    """``token_logprobs``' log-probs and entropies and, with ``value_head``, the values [B, L] of the
    states before the tokens where ``value_mask`` [B, L] is set (``value.token_values``; 0
    elsewhere), all from one forward pass; the values are None without a head."""
    from parpo.policy.llm.value import token_values

    sel = mask[:, 1:]  # the logits at position j score token j + 1
    keep = sel.any(0).nonzero().squeeze(-1)  # [K] positions some row scores; the prompts' are not projected
    out = forward(model, ids, attention, hidden=value_head is not None, keep=keep)
    logits = out.logits[sel[:, keep]].float() / temperature  # [N, V], in the row-major order of sel
    if allowed is not None:
        logits = logits.masked_fill(~allowed.to(logits.device), float("-inf"))
    lp = torch.log_softmax(logits, dim=-1)
    picked = lp.gather(-1, ids[:, 1:][sel].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():  # entropies are read as values (metrics, turn_gae weights), never differentiated:
        # no graph, so backward keeps no [N, V] copies of them; masked tokens: exp(-inf) * -inf would
        # be nan; clamped, they add 0
        ent = -(lp.exp() * lp.clamp(min=torch.finfo(lp.dtype).min)).sum(-1)
    logp = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)
    entropy = torch.zeros_like(logp)
    logp[:, 1:][sel] = picked
    entropy[:, 1:][sel] = ent
    if value_head is None:
        return logp, entropy, None
    vm = mask if value_mask is None else value_mask
    return logp, entropy, token_values(value_head, out.hidden_states[-1], vm)
