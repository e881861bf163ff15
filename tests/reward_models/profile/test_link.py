"""The stage-1 -> stage-2 link: initialisation from profiles, or an L2 pull towards a learned map."""

from __future__ import annotations

import torch

from data_pipelines.dataset import Dataset
from reward_models.data import RewardData
from reward_models.profile.fit import link_init
from tests.plugins.rewards import reward_config


def test_link_init_rows():
    z = torch.tensor([[1.0, 2.0, 0.5], [1.0, 2.0, 0.5], [-1.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
    rows = link_init(z, 6, 0.05, seed=0)
    assert rows.shape == (4, 6)
    torch.testing.assert_close(rows[0], rows[1])  # same profile, same start
    assert not torch.equal(rows[0], rows[2])
    torch.testing.assert_close(rows[:3].std(), torch.tensor(0.05))
    assert rows[3].abs().sum() > 0  # no profile: a random row, not zero
    torch.testing.assert_close(link_init(z, 6, 0.05, seed=0), rows)  # seeded


def test_module_links(tiny_synth):
    from reward_models.training import RewardModule

    ds = Dataset(tiny_synth)
    cfg = reward_config("stage1.link=init")
    data = RewardData.load(ds, cfg.split.name, 0, cfg.split.positives)
    z = torch.randn(data.n_users, 4, generator=torch.Generator().manual_seed(1))
    init = RewardModule(data, cfg, z)
    torch.testing.assert_close(init.model.user.detach(), link_init(z, init.model.user.shape[1], 0.05, 0))
    assert init.profile_map is None
    reg = RewardModule(data, reward_config("stage1.link=regularize"), z)
    opt_params = {id(p) for g in reg.configure_optimizers().param_groups for p in g["params"]}
    assert reg.profile_map is not None and id(reg.profile_map.weight) in opt_params
    off = RewardModule(data, reward_config("stage1.enabled=false"), z)
    assert off.profile_map is None and not torch.equal(off.model.user.detach(), init.model.user.detach())
