"""Optimiser construction: AdamW everywhere, or Muon on hidden 2-D matrices only."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from parpo.algorithms import OptimConfig, build_optimizers, split_params


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(10, 8)
        self.block = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 8, bias=False))
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.embed_tokens(x)))


def test_split_puts_only_hidden_matrices_on_muon() -> None:
    muon, adamw = split_params(Tiny())
    assert [n for n, _ in muon] == ["block.0.weight", "block.2.weight"]
    assert sorted(n for n, _ in adamw) == sorted(
        ["embed_tokens.weight", "block.0.bias", "block.1.weight", "block.1.bias", "head.weight", "head.bias"]
    )


def test_adamw_only_with_no_decay_on_1d_params() -> None:
    (opt,) = build_optimizers(Tiny(), OptimConfig(weight_decay=0.1))
    assert isinstance(opt, torch.optim.AdamW)
    decays = sorted((g["weight_decay"], len(g["params"])) for g in opt.param_groups)
    assert decays == [(0.0, 4), (0.1, 4)]  # 3 biases + norm gain / embedding, 2 hidden, head


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon needs torch >= 2.9")
def test_muon_plus_adamw_step() -> None:
    torch.manual_seed(0)
    model = Tiny()
    opts = build_optimizers(model, OptimConfig(muon=True, lr=1e-2))
    assert [type(o).__name__ for o in opts] == ["Muon", "AdamW"]
    before = model.block[0].weight.detach().clone()
    loss = model(torch.tensor([1, 2, 3])).logsumexp(-1).mean()
    loss.backward()
    for o in opts:
        o.step()
    assert not torch.equal(before, model.block[0].weight)


def test_the_value_head_gets_its_own_learning_rate() -> None:
    net = nn.ModuleDict({"body": nn.Linear(4, 4), "value_head": nn.Linear(4, 1)})
    (adamw,) = build_optimizers(net, OptimConfig(lr=1e-3, critic_lr=1e-2))
    lr = {id(p): g["lr"] for g in adamw.param_groups for p in g["params"]}
    assert {lr[id(p)] for p in net["body"].parameters()} == {1e-3}
    assert {lr[id(p)] for p in net["value_head"].parameters()} == {1e-2}
    (same,) = build_optimizers(net, OptimConfig(lr=1e-3))
    assert {g["lr"] for g in same.param_groups} == {1e-3}
