"""Stage 1 end to end: trained with the dice preset, published in the same reward version,
read back identically, cold users and items scored through its maps; the profile map
recovers true interest on synthetic data."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from data_pipelines.dataset import Dataset
from data_pipelines.synth import SynthConfig, Truth, write
from parpo_core.artefacts import Lineage, Registry, SplitRef
from reward_models.data import RewardData
from reward_models.pipeline import cold_profiles, train_weights
from reward_models.readout import RewardModel
from tests.plugins.rewards import reward_config

STAGE1_FAST = ["split.name=cold_users", "stage1.epochs=2", "stage1.map_epochs=3", "stage1.dim=8"]


@pytest.fixture(scope="module")
def trained(tiny_synth, tmp_path_factory):
    """(data, weights, metadata, registry version folder) of a tiny dice + stage 1 run."""
    torch.set_num_threads(1)
    cfg = reward_config(*STAGE1_FAST)
    assert cfg.stage1.enabled  # on by default in the dice preset
    ds = Dataset(tiny_synth)
    data = RewardData.load(ds, "cold_users", 0, cfg.split.positives)
    tmp = tmp_path_factory.mktemp("stage1")
    _, weights, stage1 = train_weights(cfg, ds, data, tmp / "run")
    meta = {"stage1": stage1}
    ids = {k: ds.root / ds.manifest["tables"][f"idmaps/{k}"]["path"] for k in ("users", "items")}
    lineage = Lineage(data_fingerprint=ds.fingerprint, split=SplitRef(name="cold_users", seed=0), seed=0)
    v = Registry(tmp / "REG").publish("reward", lineage=lineage, weights=weights, metadata=meta, idmaps=ids)
    return data, weights, meta, v.path


def test_stage1_travels_in_the_reward_version(trained):
    data, weights, meta, path = trained
    assert any(k.startswith("stage1.encoder.") for k in weights)
    assert meta["stage1"]["views"] == ["events", "activity", "content", "price", "features"]
    loaded = RewardModel.load(path)
    assert loaded.stage1 is not None
    for k, v in weights.items():
        torch.testing.assert_close(loaded.stage1.tensors().get(k, v).float(), v.float(), rtol=0, atol=0)


def test_save_load_identical_scores(trained):
    data, weights, meta, path = trained
    mem = RewardModel(weights, data.user_ids(), data.item_ids(), meta)
    disk = RewardModel.load(path)
    prof = cold_profiles(data.cold_profile)
    users = [*sorted(prof)[:5], "nobody", data.user_ids()[0]]
    cold_items = [data.item_ids()[i] for i in np.flatnonzero(~data.seen_items())[:3]]
    items = [*cold_items, *data.item_ids()[:4]][: len(users)]
    a, b = mem.score(users, items, prof), disk.score(users, items, prof)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    np.testing.assert_array_equal(
        mem.preference_reward(users, [items] * len(users), prof),
        disk.preference_reward(users, [items] * len(users), prof),
    )


def test_cold_users_and_items_go_through_the_maps(trained):
    data, weights, meta, _ = trained
    rm = RewardModel(weights, data.user_ids(), data.item_ids(), meta)
    base = RewardModel(
        {k: v for k, v in weights.items() if not k.startswith("stage1.")}, data.user_ids(), data.item_ids()
    )
    prof = cold_profiles(data.cold_profile)
    cold_user = sorted(prof)[0]
    item = data.item_ids()[int(np.flatnonzero(data.seen_items())[0])]
    s = rm.score([cold_user, "nobody", "stranger"], [item] * 3, {cold_user: prof[cold_user], "stranger": {}})
    assert s["cold"].tolist() == [True, True, True]
    assert np.isfinite(s["click"]).all()
    # no evidence at all: the stage-2 fallback (mean warm user), unchanged by stage 1
    assert s["click"][1] == pytest.approx(base.score(["nobody"], [item])["click"][0])
    # a profile (events and the id map's features): the profile map, not the fallback
    assert s["click"][0] != pytest.approx(base.score([cold_user], [item])["click"][0])
    # a new user known only by features
    f = rm.score(["new"], [item], {"new": {"features": {"region": "r01", "age_band": "25-34"}}})
    assert f["cold"][0] and f["click"][0] != pytest.approx(s["click"][1])
    cold_item = data.item_ids()[int(np.flatnonzero(~data.seen_items())[0])]
    c = rm.score([data.user_ids()[0]], [cold_item])
    assert c["cold_item"][0] and np.isfinite(c["click"]).all()
    assert c["click"][0] != pytest.approx(base.score([data.user_ids()[0]], [cold_item])["click"][0])
    r = rm.preference_reward(["nobody", cold_user], [[cold_item, item], []])
    assert np.isfinite(r).all() and 0 <= r[0] <= 1 and r[1] == 0


def test_stage1_off(tiny_synth, tmp_path):
    cfg = reward_config("stage1.enabled=false", "train.epochs=1")
    ds = Dataset(tiny_synth)
    data = RewardData.load(ds, cfg.split.name, 0, cfg.split.positives)
    _, weights, meta = train_weights(cfg, ds, data, tmp_path / "run")
    assert meta == {} and not any(k.startswith("stage1.") for k in weights)


def test_load_with_stage1_without_lightning(trained):
    code = (
        "import sys\n"
        "from reward_models.readout import RewardModel\n"
        "rm = RewardModel.load(sys.argv[1])\n"
        "s = rm.score(['nobody'], [rm.metadata and next(iter(rm.item_index))], {'nobody': ['x']})\n"
        "assert rm.stage1 is not None and bool(s['cold'][0])\n"
        "assert 'pytorch_lightning' not in sys.modules and 'lightning' not in sys.modules\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(trained[3])], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr


def test_profile_map_recovers_true_interest(tmp_path_factory):
    """Fitted on warm users' *true* vectors, the map places cold users (cold_profile + features)
    much closer to their true interest than the mean warm user does."""
    from scipy.stats import spearmanr

    from reward_models.profile.fit import fit_encoder, fit_maps, prepare
    from reward_models.profile.views import ProfileLog

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("stage1-truth") / "data"
    write(
        SynthConfig(
            n_users=300, n_items=150, seed=3, rounds=8, interest_features=8, interest_feature_noise=0.5
        ),
        root,
    )
    cfg = reward_config("model.dim=16", "stage1.epochs=10", "stage1.map_epochs=30")
    ds = Dataset(root)
    data = RewardData.load(ds, "cold_users", 0, cfg.split.positives)
    truth = Truth(root)
    u = torch.from_numpy(truth.user_vectors[truth.user_index(data.user_ids())]).float()
    v = torch.from_numpy(truth.item_vectors[truth.item_index(data.item_ids())]).float()
    d = prepare(ds, data, cfg, ["interest"])
    fit_encoder(d, cfg.stage1, 0)
    seen = torch.from_numpy(data.seen_items())
    fit_maps(d, u, v, seen, cfg.stage1, 0)
    cold = sorted(set(data.cold_profile["user_id"].to_list()))
    rows = torch.tensor([data.user_ids().index(x) for x in cold])
    log = ProfileLog.from_frame(
        data.cold_profile, d.model.spec, cold, {k: i for i, k in enumerate(data.item_ids())}
    )
    with torch.no_grad():
        pred = (d.model.user_vectors(log, d.model.user_features[rows], v, seen) @ v.T).numpy()
    true = (u[rows] @ v.T).numpy()
    mean = (u[d.warm].mean(0) @ v.T).numpy()
    ours = np.mean([spearmanr(pred[k], true[k])[0] for k in range(len(cold))])
    fallback = np.mean([spearmanr(mean, true[k])[0] for k in range(len(cold))])
    assert len(cold) >= 20
    assert ours > 0.4 and ours > fallback + 0.1
