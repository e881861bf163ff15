"""Adam whose embedding rows move only at the steps that give them a gradient (lazy Adam).

The parameters of a group with ``rows=True`` are row tables [n, w] (the id tables of the ``mf``
backbone): at each step the rows with a nonzero gradient take Adam's update (their moments, then
their values, with the step's bias correction); every other row keeps its value and moments,
where dense Adam would still move it by its decaying momentum. Every other group takes torch's
fused Adam step. This is TensorFlow Addons' ``LazyAdam``, and torch's ``SparseAdam`` (which
takes sparse parameters only) next to Adam in one optimiser.

A row table's gradient is sparse in one process (``CausalEmbeddings.sparse_rows``: the rows the
step read), so a step costs the rows read, not the rows held: at 760k rows, dense Adam over
every row was half a step (benchmarks/README.md "Reward model at 5M positives"). Under DDP the
reducer all-reduces dense gradients and the rows are found on them: the same update, at the
dense cost.

With every row in every step it is Adam, to rounding (tested). The state has Adam's keys
(``step``, ``exp_avg``, ``exp_avg_sq``), so checkpoints resume it exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.optim.adam import adam


def row_groups(params: Iterable[Tensor], tables: list[Tensor]) -> list[dict[str, Any]]:
    """Parameter groups for ``LazyAdam``: ``tables`` (row tables [n, w]) lazily, the rest of ``params``
    by fused Adam."""
    rest = [p for p in params if all(p is not q for q in tables)]
    return [{"params": tables, "rows": True}, {"params": rest}]


class LazyAdam(torch.optim.Adam):
    """``torch.optim.Adam`` (fused) for ordinary groups, the lazy row update for ``rows=True`` groups."""

    def __init__(self, params: Iterable[dict[str, Any]], lr: float, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr=lr, weight_decay=weight_decay, fused=True)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:  # Lightning passes forward + backward as the closure
            with torch.enable_grad():
                loss = closure()
        held = []
        for group in self.param_groups:
            if not group.get("rows"):
                continue
            for p in group["params"]:
                if p.grad is not None:
                    self._rows_step(p, group)
                    held.append((p, p.grad))
                    p.grad = None  # Adam's own step skips it
        super().step()
        for p, g in held:
            p.grad = g
        return loss

    def _rows_step(self, p: Tensor, group: dict[str, Any]) -> None:
        """Adam on the rows of p [n, w] with a nonzero gradient (a sparse gradient's duplicates summed)."""
        if p.grad.is_sparse:
            g = p.grad.coalesce()
            idx, grad = g.indices()[0], g.values()
            live = grad.ne(0).any(1)  # a row read with an exactly zero gradient stays, as in the dense case
            if not bool(live.all()):
                idx, grad = idx[live], grad[live]
        else:
            idx = p.grad.ne(0).any(1).nonzero().squeeze(1)
            grad = p.grad.index_select(0, idx)
        state = self.state[p]
        if not state:  # Adam's layout (fused: a float32 step tensor on the parameter's device)
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        rows = [x.index_select(0, idx) for x in (p, state["exp_avg"], state["exp_avg_sq"])]
        b1, b2 = group["betas"]
        # Adam's own fused kernel on the gathered rows (it counts the step), then the rows go back
        adam(
            rows[:1], [grad], rows[1:2], rows[2:], [], [state["step"]], fused=True, amsgrad=False,
            beta1=b1, beta2=b2, lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"],
            maximize=False,
        )  # fmt: skip
        for x, r in zip((p, state["exp_avg"], state["exp_avg_sq"]), rows, strict=True):
            x.index_copy_(0, idx, r)
