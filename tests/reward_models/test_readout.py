"""Readout by external ids: formulas by hand, cold users and items, the preference reward."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch

from parpo_core.artefacts import Lineage, Registry, SplitRef
from reward_models.readout import RewardModel

USERS = ["ua", "ub", "uc", "ud"]  # ud: in the id map, never trained
ITEMS = ["i0", "i1", "i2", "i3", "i4"]  # i4: never trained


def tables() -> dict[str, torch.Tensor]:
    ui = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [9.0, 9.0]])
    ii = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [-1.0, -1.0], [7.0, 7.0]])
    uc = torch.tensor([[1.0], [3.0], [0.0], [5.0]])
    ic = torch.tensor([[0.0], [1.0], [2.0], [3.0], [5.0]])
    return {
        "user_interest": ui,
        "item_interest": ii,
        "user_conformity": uc,
        "item_conformity": ic,
        "user_seen": torch.tensor([1, 1, 1, 0], dtype=torch.uint8),
        "item_seen": torch.tensor([1, 1, 1, 1, 0], dtype=torch.uint8),
    }


@pytest.fixture
def rm() -> RewardModel:
    return RewardModel(tables(), USERS, ITEMS)


def test_scores_by_hand(rm):
    s = rm.score(["ua", "ub", "uc"], ["i0", "i2", "i3"])
    np.testing.assert_allclose(s["interest"], [1.0, 1.0, -2.0])
    np.testing.assert_allclose(s["conformity"], [0.0, 6.0, 0.0])
    np.testing.assert_allclose(s["click"], [1.0, 7.0, -2.0])
    assert not s["cold"].any()


def test_cold_users_and_items(rm):
    mean_user_int = np.array([2.0, 2.0]) / 3  # warm users ua, ub, uc
    mean_user_con = 4.0 / 3
    mean_item_int = np.array([0.5, 0.5]) / 4  # warm items i0..i3
    s = rm.score(
        ["nobody", "ud", "ua", "new"], ["i0", "i1", "i4", "zz"], profiles={"new": ["i0", "i2", "i4", "??"]}
    )
    assert s["cold_user"].tolist() == [True, True, False, True]
    assert s["cold_item"].tolist() == [False, False, True, True]
    assert s["cold"].tolist() == [True, True, True, True]
    # no profile: the mean warm user; an untrained id-map user is treated the same
    assert s["interest"][0] == pytest.approx(mean_user_int @ [1.0, 0.0])
    assert s["interest"][1] == pytest.approx(mean_user_int @ [0.5, 0.5])
    assert s["conformity"][1] == pytest.approx(mean_user_con * 1.0)
    # an unknown item: the mean warm item (a neutral score)
    assert s["interest"][2] == pytest.approx(np.array([1.0, 0.0]) @ mean_item_int)
    # with a profile: the mean interest vector of its warm, known items (i0, i2)
    assert s["interest"][3] == pytest.approx(np.array([0.5, 0.5]) @ mean_item_int)
    # aligned profiles work the same as a mapping
    t = rm.score(["new"], ["i1"], profiles=[["i0", "i2"]])
    assert t["interest"][0] == pytest.approx(0.5)


def test_score_matrix_is_score_on_every_pair(rm):
    users, items = ["ua", "ub", "uc", "nobody", "new"], [*ITEMS, "zz"]
    prof = {"new": ["i0", "i2"]}
    m = rm.score_matrix(users, items, prof)
    assert m["interest"].shape == m["conformity"].shape == (5, 6)
    pairs = rm.score([u for u in users for _ in items], items * len(users), prof)
    np.testing.assert_allclose(m["interest"].ravel(), pairs["interest"], rtol=1e-6)
    np.testing.assert_allclose(m["conformity"].ravel(), pairs["conformity"], rtol=1e-6)
    assert m["cold_item"].tolist() == [False, False, False, False, True, True]


def test_score_gathers_pairs_a_block_at_a_time_with_the_same_values(rm, monkeypatch):
    """Many pairs over few distinct items (a catalogue-wide batch): blocks of 7 pairs give every
    value and flag of one block."""
    import reward_models.readout as readout

    users = [u for u in ("ua", "ub", "nobody") for _ in range(10)]
    items = [[*ITEMS, "zz"][k % 6] for k in range(30)]
    whole = rm.score(users, items)
    monkeypatch.setattr(readout, "SCORE_BLOCK", 7)
    blocked = rm.score(users, items)
    for k, v in whole.items():
        np.testing.assert_array_equal(blocked[k], v, err_msg=k)
    assert blocked["cold_item"].sum() == 10  # i4 and zz, five pairs each


def test_preference_reward(rm):
    # ua's interest over the reference items i0..i3: 1, .5, 0, -1
    r = rm.preference_reward(["ua", "ua", "ua", "ua", "ub"], [["i0"], ["i3"], ["i0", "i3"], [], ["i4"]])
    assert r.shape == (5,) and ((r >= 0) & (r <= 1)).all()
    assert r[0] == pytest.approx((3 + 0.5) / 4)  # 3 items below, itself ties: 3.5 / 4
    assert r[1] == pytest.approx(0.5 / 4)
    d = 1 / np.log2(np.array([2.0, 3.0]))
    assert r[2] == pytest.approx((d[0] * 3.5 / 4 + d[1] * 0.5 / 4) / d.sum())  # position-discounted
    assert r[3] == 0.0  # empty slate
    assert r[4] == 0.5  # a cold item is neutral
    # interest-based: ub's conformity makes i3 its top click, not its preference
    click = rm.score(["ub"] * 4, ITEMS[:4])["click"]
    assert int(np.argmax(click)) == 3
    assert rm.preference_reward(["ub"], [["i3"]])[0] < rm.preference_reward(["ub"], [["i2"]])[0]


def test_mf_model_has_zero_conformity():
    t = {k: v for k, v in tables().items() if "conformity" not in k}
    rm = RewardModel(t, USERS, ITEMS)
    s = rm.score(["ua"], ["i1"])
    assert s["conformity"][0] == 0.0 and s["click"][0] == s["interest"][0] == 0.5


def publish_hand_model(root: Path) -> Path:
    idm = root / "maps"
    idm.mkdir()
    pl.DataFrame({"id": USERS, "index": list(range(4))}).write_parquet(idm / "users.parquet")
    pl.DataFrame({"id": ITEMS, "index": list(range(5))}).write_parquet(idm / "items.parquet")
    reg = Registry(root / "REG")
    lineage = Lineage(data_fingerprint="ab" * 32, split=SplitRef(name="temporal", seed=0), seed=0)
    reg.publish(
        "reward", lineage=lineage, weights=tables(), metadata={"model": "causal_embeddings"}, idmaps=idm
    )
    return root / "REG"


def test_load_from_registry_without_lightning(tmp_path):
    reg = publish_hand_model(tmp_path)
    code = (
        "import sys\n"
        "from reward_models.readout import RewardModel\n"
        "rm = RewardModel.load(sys.argv[1])\n"
        "s = rm.score(['ua', 'zz'], ['i0', 'i0'])\n"
        "r = rm.preference_reward(['ua'], [['i0', 'i3']])\n"
        "print(s['click'][0], s['cold'].tolist(), round(float(r[0]), 6))\n"
        "assert 'pytorch_lightning' not in sys.modules and 'lightning' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(reg)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:3] == ["1.0", "[False,", "True]"]


def test_corrupted_version_fails_with_a_clear_error(tmp_path):
    from parpo_core.artefacts import RegistryError

    reg = publish_hand_model(tmp_path)
    weights = next((reg / "reward").glob("v*/weights/model.safetensors"))
    weights.chmod(0o644)
    weights.write_bytes(weights.read_bytes()[:-8] + b"xxxxxxxx")
    with pytest.raises(RegistryError, match="corrupted"):
        RewardModel.load(reg)
