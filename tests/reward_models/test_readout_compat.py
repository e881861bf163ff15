"""Versions published before ``model_version`` (ids-only DICE, commit 342ad16) still load and score alike."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from parpo_core.artefacts.errors import RegistryError
from reward_models.readout import RewardModel

FIXTURE = Path(__file__).parent / "fixtures" / "reward_v1"


def test_a_version_written_by_the_old_code_scores_as_it_did():
    want = json.loads((FIXTURE / "expected.json").read_text())
    rm = RewardModel.load(FIXTURE)  # the registry root: its production reward version
    assert "model_version" not in rm.metadata
    got = rm.score(want["users"], want["items"])
    for k, v in want["score"].items():
        np.testing.assert_allclose(got[k], np.asarray(v), rtol=1e-6, atol=1e-7, err_msg=k)
    assert got["cold_user"][-1]  # the never-seen user: scored through stage 1's fallbacks
    items = want["items"]
    pr = rm.preference_reward(want["users"][:3], [items[:3], items[2:5], items[4:6]])
    # The old code compared each slate item with its own reference score across two kernels, so
    # rounding put it half a reference position above or below itself; scores within TIE_TOL now
    # tie (half credit), which moves each item by at most 1 / (2 x reference items).
    np.testing.assert_allclose(pr, want["preference_reward"], rtol=0, atol=0.5 / rm.reference.numel())


def test_an_unknown_model_version_is_one_line(tmp_path):
    reg = tmp_path / "REG"
    shutil.copytree(FIXTURE, reg)
    v = next((reg / "reward").glob("v*"))
    rm = RewardModel.load(v)
    with pytest.raises(RegistryError, match=r"model_version 9 is not one this code reads \(1, 2\)"):
        RewardModel(
            {"user_interest": rm.user["interest"], "item_interest": rm.item["interest"]},
            list(rm.user_index),
            list(rm.item_index),
            {"model_version": 9},
        )
