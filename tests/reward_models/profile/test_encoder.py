"""Encoder invariants: attention sums to one over present views, view dropout, InfoNCE sign."""

from __future__ import annotations

import torch

from reward_models.profile import ProfileEncoder, info_nce, view_dropout

DIMS = {"events": 3, "content": 4, "features": 2}


def test_attention_weights_sum_to_one_over_present_views():
    torch.manual_seed(0)
    enc = ProfileEncoder(DIMS, dim=8, hidden=16)
    torch.nn.init.normal_(enc.query)  # non-uniform attention
    views = {k: torch.randn(5, d) for k, d in DIMS.items()}
    mask = torch.tensor([[1, 1, 1], [1, 0, 1], [0, 0, 1], [0, 0, 0], [1, 1, 0]], dtype=torch.bool)
    z, w = enc(views, mask)
    assert z.shape == (5, 8) and w.shape == (5, 3)
    torch.testing.assert_close(w[[0, 1, 2, 4]].sum(1), torch.ones(4))
    assert (w[~mask] == 0).all()
    assert (w[3] == 0).all() and (z[3] == 0).all()  # no evidence: a zero profile, not NaN
    assert w[0].std() > 0


def test_absent_views_do_not_change_the_profile():
    enc = ProfileEncoder(DIMS, dim=8, hidden=16)
    views = {k: torch.randn(1, d) for k, d in DIMS.items()}
    mask = torch.tensor([[True, False, True]])
    z1, _ = enc(views, mask)
    views["content"] = torch.randn(1, 4) * 100
    z2, _ = enc(views, mask)
    torch.testing.assert_close(z1, z2)


def test_view_dropout_keeps_one_present_view():
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1, 1, 1], [0, 1, 0], [0, 0, 0]], dtype=torch.bool).repeat(100, 1)
    keep = view_dropout(mask, 0.9, g)
    assert not (keep & ~mask).any()
    assert keep[mask.any(1)].any(1).all()
    assert keep[0::3].sum() < mask[0::3].sum()  # something was dropped


def test_info_nce_prefers_matching_rows():
    torch.manual_seed(0)
    a = torch.randn(16, 8)
    matched = info_nce(a, a + 0.01 * torch.randn(16, 8), 0.2)
    shuffled = info_nce(a, a[torch.randperm(16)], 0.2)
    assert matched < shuffled


def test_reconstruction_ignores_absent_views():
    enc = ProfileEncoder(DIMS, dim=8, hidden=16)
    views = {k: torch.randn(2, d) for k, d in DIMS.items()}
    mask = torch.tensor([[True, True, False], [True, True, False]])
    z, _ = enc(views, mask)
    base = enc.reconstruction(z, views, mask)
    views["features"] = views["features"] + 1e3
    torch.testing.assert_close(enc.reconstruction(z, views, mask), base)
