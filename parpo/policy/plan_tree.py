"""N sampled episodes of the native policy as one plan tree: each distinct plan runs once.

N independent episodes of a request mostly repeat the same tool calls (measured plan
diversity 0-0.26 bits). Here the N samples start at the task's first observation (one tree
node) and move together: at every step the policy runs one forward over the distinct live
nodes (of every task of the batch), each sample draws its own call from its node's
distribution, samples that drew the same call share one child node, and the environment steps
each child once. A sample that recommends ends there: the slates of all samples ending at a
node are drawn in one Gumbel top-k over that node's pointer scores.

Same distribution as N separate episodes, by construction: each sample's call at each step is
drawn independently from the same per-state distribution the episode loop samples
(``NativePolicy.act``), and the environment is deterministic given the calls. The slate is
exact too: the pointer's scores do not change between positions of a slate (one forward per
step; ``token_logprobs`` scores slot j as a softmax over the same scores without the items of
slots < j), so the slate is a Plackett-Luce draw, which Gumbel top-k samples exactly.

The tree also gives exact probabilities: a plan's probability is the product of its calls'
head probabilities, and the probability that item i comes first given the plan is its
pointer softmax. Summed over the distinct plans drawn, that is the exact part of the first
slot's marginal; the plan probability no draw reached (``unexplored``) bounds the rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from parpo.env.environment import BatchEnv
from parpo.env.observation import Call
from parpo.env.schema import Recommend
from parpo.env.tasks import Task
from parpo.policy.slates import SlateDraws
from parpo.policy.tokens import CONSTRAIN, HEAD, RECOMMEND, SCOPE, SEARCH, STRATEGY, TOOL, decode

if TYPE_CHECKING:
    from parpo.policy.native import NativePolicy


def head_logprobs(logits: dict[str, Tensor], x: dict[str, Tensor], tau: float) -> dict[str, Tensor]:
    """Log-probabilities per node of each head's choices at temperature ``tau``: ``tool`` [D, 3]
    (-inf where not allowed), ``strategy`` [D, S], ``scope`` [D, 2], ``constrain`` [D, 2]."""
    tool = logits["tool"] / tau
    return {
        "tool": torch.log_softmax(tool.masked_fill(~x["tool_mask"], float("-inf")), -1),
        **{h: torch.log_softmax(logits[h] / tau, -1) for h in ("strategy", "scope", "constrain")},
    }


def draw_calls(
    logp: dict[str, Tensor], x: dict[str, Tensor], node: Tensor, gen: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """One call per sample from its node's heads (``node`` [M] int64 into the D nodes).

    Returns canonical head tokens [M, HEAD] int64 (slots that are no choice hold 0, as
    ``NativePolicy.act`` records them) and their joint log-probability [M] float64.
    """

    def draw(name: str) -> tuple[Tensor, Tensor]:
        lp = logp[name][node]  # [M, A]
        pick = torch.multinomial(lp.exp(), 1, generator=gen).squeeze(-1)
        return pick, lp.gather(-1, pick.unsqueeze(-1)).squeeze(-1).double()

    tool, lp_tool = draw("tool")
    search = tool == SEARCH
    tokens = torch.zeros(node.numel(), HEAD, dtype=torch.int64, device=node.device)
    tokens[:, TOOL] = tool
    total = lp_tool
    for slot, name, free in (
        (STRATEGY, "strategy", search),
        (SCOPE, "scope", search & x["scope_free"][node]),
        (CONSTRAIN, "constrain", search & x["constrain_free"][node]),
    ):
        pick, lp = draw(name)
        tokens[:, slot] = torch.where(free, pick, 0)
        total = total + torch.where(free, lp, 0.0)
    return tokens, total


def pointer_scores(logits: dict[str, Tensor], x: dict[str, Tensor], tau: float) -> Tensor:
    """[D, N] the pointer's scores at temperature ``tau``, -inf at padded candidates."""
    n = logits["pointer"].shape[1]
    return (logits["pointer"] / tau).masked_fill(~x["cand_mask"][:, :n], float("-inf"))


def gumbel_slates(z: Tensor, node: Tensor, k: int, gen: torch.Generator | None) -> Tensor:
    """[M, k] candidate indices: one Plackett-Luce slate per sample from its node's scores
    ``z`` [D, N] (Gumbel top-k: the top k of z + Gumbel noise are a draw without replacement
    from softmax(z), in order; Yellott 1977, Kool et al. 2019)."""
    rows = z[node]
    return (rows + gumbel_noise(rows.shape, gen, rows.device)).topk(k, dim=-1).indices


def gumbel_noise(shape: torch.Size, gen: torch.Generator | None, device: torch.device) -> Tensor:
    """Standard Gumbel noise of ``shape`` (what ``NativePolicy.act`` adds to the pointer too)."""
    u = torch.rand(shape, generator=gen, device=device).clamp_(1e-20, 1.0 - 1e-7)
    return -torch.log(-torch.log(u))


def group_calls(node: Tensor, tokens: Tensor, call_logp: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Samples at the same node that drew the same call share one child node.

    ``node`` [M] int64, ``tokens`` [M, HEAD] and ``call_logp`` [M] of the M samples. Returns
    each of the C children's parent node [C] and call tokens [C, HEAD], each sample's child [M],
    and each child's call log-probability [C] (its samples all drew that call from one node).
    """
    children, child = torch.unique(torch.cat([node.unsqueeze(1), tokens], 1), dim=0, return_inverse=True)
    logp = call_logp.new_zeros(children.shape[0]).scatter(0, child, call_logp)
    return children[:, 0], children[:, 1:], child, logp


@dataclass
class _Leaf:
    """A distinct path that ended: its calls, log-probability, and for a recommend the first
    slot's softmax over its candidates (rows [m] into the catalogue)."""

    task: int
    calls: tuple[Call, ...]
    logp: float
    first: np.ndarray | None = None  # [m] float64
    rows: np.ndarray | None = None  # [m] int64
    signature: str = field(init=False)  # the plan's, as the environment reports it

    def __post_init__(self) -> None:
        ended = ["recommend"] if self.first is not None else []
        self.signature = ">".join([*(c.signature for c in self.calls), *ended])


@torch.no_grad()
def sample_tree(
    policy: NativePolicy, env: BatchEnv, tasks: Sequence[Task], n: int, gen: torch.Generator | None
) -> list[SlateDraws]:
    """``n`` episodes of each task as one plan tree (see the module doc); draw 0 is served."""
    if n < 1:
        raise ValueError(f"n must be at least 1 (draw 0 is the served one), got {n}")
    dev, tau, cat = policy.device, policy.temperature, env.catalogue
    obs = env.reset(tasks)
    node_logp = torch.zeros(len(tasks), dtype=torch.float64, device=dev)  # [D] log P(path to node)
    node_task = list(range(len(tasks)))
    sample = torch.arange(len(tasks) * n, device=dev)  # [M] live samples (task-major ids)
    node = sample // n  # [M] their nodes
    leaf_of = [-1] * (len(tasks) * n)
    slates: list[list[str]] = [[] for _ in leaf_of]
    leaves: list[_Leaf] = []
    while sample.numel():
        x = {k: v.to(dev) for k, v in policy.featurizer.encode(obs).items()}
        logits = policy.net.logits(x)
        logp = head_logprobs(logits, x, tau)
        tokens, call_logp = draw_calls(logp, x, node, gen)
        rec = tokens[:, TOOL] == RECOMMEND
        if rec.any():
            z = pointer_scores(logits, x, tau)
            picks = gumbel_slates(z, node[rec], min(policy.net.cfg.max_k, z.shape[1]), gen).tolist()
            first = torch.softmax(z, -1).double().cpu().numpy()
            leaf_lp = (node_logp + logp["tool"][:, RECOMMEND].double()).tolist()
            n_pick, n_cand = x["n_pick"].tolist(), x["cand_mask"].sum(1).tolist()
            leaf_at: dict[int, tuple[int, list[str]]] = {}  # node -> (its leaf, its candidates' ids)
            for s, d, p in zip(sample[rec].tolist(), node[rec].tolist(), picks, strict=True):
                if d not in leaf_at:
                    m, calls = n_cand[d], tuple(env.episodes[d].history)
                    leaf_at[d] = (len(leaves), obs[d].candidate_ids)
                    leaves.append(_Leaf(node_task[d], calls, leaf_lp[d], first[d, :m], obs[d].candidates[:m]))
                leaf_of[s], ids = leaf_at[d]
                slates[s] = [ids[j] for j in p[: n_pick[d]]]
        go = ~rec
        sample, node, tokens, call_logp = sample[go], node[go], tokens[go], call_logp[go]
        if not sample.numel():
            break
        parents, calls, child, child_logp = group_calls(node, tokens, call_logp)
        child_logp = node_logp[parents] + child_logp
        parent = parents.tolist()
        actions = [
            decode(obs[p], c, 0, policy.search_k) for p, c in zip(parent, calls.cpu().numpy(), strict=True)
        ]
        env.branch(parent)
        obs, _, _, truncated, _ = env.step(actions)
        node_task = [node_task[p] for p in parent]
        for c in np.flatnonzero(truncated).tolist():  # ended without a slate
            leaves.append(_Leaf(node_task[c], tuple(env.episodes[c].history), float(child_logp[c])))
            for s in sample[child == c].tolist():
                leaf_of[s] = len(leaves) - 1
        live = torch.from_numpy(~truncated).to(dev)
        keep = live[child]
        renumber = torch.cumsum(live.long(), 0) - 1  # child -> live node index
        sample, node = sample[keep], renumber[child[keep]]
        node_logp = child_logp[live]
        alive = np.flatnonzero(~truncated).tolist()
        if len(alive) < len(parent):
            obs = env.branch(alive)
            node_task = [node_task[c] for c in alive]
    return [_draws(r, n, slates, leaf_of, leaves, cat.row) for r in range(len(tasks))]


def _draws(
    r: int, n: int, slates: list[list[str]], leaf_of: list[int], leaves: list[_Leaf], row: dict[str, int]
) -> SlateDraws:
    """Task ``r``'s draws (samples r*n .. r*n + n - 1) with the first slot's exact part."""
    mine = [leaf_of[s] for s in range(r * n, (r + 1) * n)]
    distinct = sorted(set(mine))
    served = leaves[mine[0]]
    slate = slates[r * n]
    plan = [c.action for c in served.calls if c.action is not None]
    slot1 = None
    if slate:
        plan.append(Recommend(items=slate))
        item = row[slate[0]]
        slot1 = 0.0
        for leaf in (leaves[i] for i in distinct):
            if leaf.first is not None and leaf.rows is not None:
                at = np.flatnonzero(leaf.rows == item)
                slot1 += math.exp(leaf.logp) * float(leaf.first[at[0]]) if at.size else 0.0
    covered = sum(math.exp(leaves[i].logp) for i in distinct)
    return SlateDraws(
        slates=[slates[s] for s in range(r * n, (r + 1) * n)],
        plans=[leaves[i].signature for i in mine],
        served_plan=plan,
        distinct_plans=len(distinct),
        slot1=slot1,
        unexplored=max(0.0, 1.0 - covered),
    )
