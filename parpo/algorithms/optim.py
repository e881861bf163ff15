"""Optimisers: AdamW, or Muon on 2-D hidden matrices with AdamW for everything else.

Muon (Jordan et al. 2024; "Muon is Scalable for LLM Training", arXiv 2502.16982) orthogonalises
the momentum of a weight *matrix*; it is meant for hidden linear layers only. Embeddings and
output heads (matched by module type and ``OptimConfig.adamw_name_patterns``), norms and biases
(1-D) stay on AdamW. ``torch.optim.Muon`` exists from torch 2.9; older torch raises a readable
error. Muon needs whole matrices: under FSDP (sharded parameters) use AdamW.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from parpo.algorithms.config import OptimConfig


def split_params(
    model: nn.Module, patterns: Iterable[str] = ("embed", "head", "unembed")
) -> tuple[list[tuple[str, nn.Parameter]], list[tuple[str, nn.Parameter]]]:
    """``(muon, adamw)`` named trainable parameters: Muon gets 2-D weights of hidden layers; AdamW gets
    embeddings, heads, norms, biases and anything that is not 2-D."""
    pats = tuple(p.lower() for p in patterns)
    embedding_params = {
        id(p)
        for m in model.modules()
        if isinstance(m, nn.Embedding | nn.EmbeddingBag)
        for p in m.parameters()
    }
    muon, adamw = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        hidden_matrix = (
            p.ndim == 2 and id(p) not in embedding_params and not any(s in name.lower() for s in pats)
        )
        (muon if hidden_matrix else adamw).append((name, p))
    return muon, adamw


#: Parameters whose name starts with this are the critic's (``OptimConfig.critic_lr``).
CRITIC_PREFIX = "value_head"


def _adamw_groups(named: list[tuple[str, nn.Parameter]], cfg: OptimConfig) -> list[dict[str, object]]:
    groups: list[dict[str, object]] = []
    for critic in (False, True):
        part = [(n, p) for n, p in named if n.startswith(CRITIC_PREFIX) == critic]
        extra = {"lr": cfg.critic_lr} if critic and cfg.critic_lr is not None else {}
        # No weight decay on biases and norm gains (1-D), the usual choice.
        decay = [p for _, p in part if p.ndim >= 2]
        no_decay = [p for _, p in part if p.ndim < 2]
        if decay:
            groups.append({"params": decay, "weight_decay": cfg.weight_decay, **extra})
        if no_decay:
            groups.append({"params": no_decay, "weight_decay": 0.0, **extra})
    return groups


def build_optimizers(model: nn.Module, cfg: OptimConfig) -> list[torch.optim.Optimizer]:
    """``[AdamW]``, or ``[Muon, AdamW]`` when ``cfg.muon`` (pass all of them to ``fabric.setup`` and
    step each). Muon uses ``adjust_lr_fn="match_rms_adamw"`` so ``muon_lr`` defaults to ``lr``."""
    muon_named, adamw_named = split_params(model, cfg.adamw_name_patterns) if cfg.muon else ([], [])
    if not cfg.muon:
        adamw_named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    optimizers: list[torch.optim.Optimizer] = []
    if muon_named:
        if not hasattr(torch.optim, "Muon"):
            raise RuntimeError(
                f"OptimConfig.muon needs torch.optim.Muon (torch >= 2.9); this is torch {torch.__version__}"
            )
        optimizers.append(
            torch.optim.Muon(
                [p for _, p in muon_named],
                lr=cfg.muon_lr if cfg.muon_lr is not None else cfg.lr,
                weight_decay=cfg.weight_decay,
                momentum=cfg.muon_momentum,
                adjust_lr_fn="match_rms_adamw",
            )
        )
    groups = _adamw_groups(adamw_named, cfg)
    if groups:
        optimizers.append(torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps))
    return optimizers
