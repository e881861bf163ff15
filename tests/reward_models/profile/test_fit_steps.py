"""Stage 1's step budget: ``stage1.max_steps`` cuts the batches, never changes the ones it keeps."""

from __future__ import annotations

import torch

from reward_models.profile.fit import _steps


def batches(epochs: int, cap: int) -> list[torch.Tensor]:
    return list(_steps(10, 4, epochs, cap, torch.Generator().manual_seed(3)))


def test_no_cap_is_every_epoch_of_batches():
    got = batches(3, 0)
    assert [b.numel() for b in got] == [4, 4, 2] * 3
    for e in range(3):  # each epoch is one permutation of the 10 rows
        assert sorted(torch.cat(got[3 * e : 3 * e + 3]).tolist()) == list(range(10))


def test_a_cap_keeps_the_first_batches_of_the_uncapped_run():
    full, capped = batches(3, 0), batches(3, 5)
    assert len(capped) == 5
    for a, b in zip(capped, full[:5], strict=True):
        assert torch.equal(a, b)
    assert len(batches(2, 50)) == 6  # a cap above epochs x batches changes nothing
