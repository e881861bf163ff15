"""Per-row sampling of the hf engine: a row's draw depends on its seed and scores alone (so a
batch split across rollout workers samples the same tokens), and the draws follow the softmax."""

from __future__ import annotations

import numpy as np
import torch

from parpo.policy.llm.engine import RowSampler, row_seeds, row_uniforms


def _picks(sampler: RowSampler, scores: torch.Tensor) -> list[int]:
    out = sampler(None, scores)
    assert (torch.isfinite(out).sum(1) == 1).all()  # one token left per row: greedy takes it
    return out.argmax(1).tolist()


def test_a_rows_draw_depends_on_its_seed_and_scores_not_on_its_batch() -> None:
    scores = torch.randn(6, 50, generator=torch.Generator().manual_seed(0))
    seeds = row_seeds(torch.Generator().manual_seed(3), 6)
    whole = _picks(RowSampler(seeds, 0.8), scores)
    halves = _picks(RowSampler(seeds[:2], 0.8), scores[:2]) + _picks(RowSampler(seeds[2:], 0.8), scores[2:])
    order = [4, 0, 5, 2, 1, 3]
    shuffled = _picks(RowSampler([seeds[i] for i in order], 0.8), scores[order])
    assert whole == halves == [shuffled[order.index(i)] for i in range(6)]
    # the same generator state gives the same seeds; another gives others
    assert (
        seeds
        == row_seeds(torch.Generator().manual_seed(3), 6)
        != row_seeds(torch.Generator().manual_seed(4), 6)
    )


def test_each_step_draws_anew_and_the_draws_follow_the_softmax() -> None:
    u = row_uniforms(np.arange(4, dtype=np.uint64), 0)
    assert ((u > 0) & (u < 1)).all() and not np.array_equal(u, row_uniforms(np.arange(4, dtype=np.uint64), 1))
    p = torch.tensor([0.2, 0.5, 0.3, 0.0])
    n = 20000
    scores = p.log().expand(n, 4)  # the zero-probability token is -inf
    picks = np.array(_picks(RowSampler(row_seeds(torch.Generator().manual_seed(0), n), 1.0), scores))
    freq = np.bincount(picks, minlength=4) / n
    assert freq[3] == 0 and np.abs(freq[:3] - p[:3].numpy()).max() < 0.015  # 4.5 binomial sd at n = 20000
    # temperature 0.5 squares the probabilities (renormalised)
    picks = np.array(_picks(RowSampler(row_seeds(torch.Generator().manual_seed(1), n), 0.5), scores))
    q = p[:3] ** 2 / (p[:3] ** 2).sum()
    assert np.abs(np.bincount(picks, minlength=4)[:3] / n - q.numpy()).max() < 0.015
