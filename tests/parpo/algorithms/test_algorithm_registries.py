"""The registries are plain name -> function mappings with readable misses."""

from __future__ import annotations

import parpo.algorithms as A


def test_registries_hold_the_documented_names() -> None:
    assert set(A.ADVANTAGES) == {"grpo", "rloo", "gdpo", "gdpo_user", "dr_grpo", "parpo"}
    assert set(A.LOSSES) == {"ppo", "turn_ratio", "sao_mask"}
    assert set(A.VALUE_ESTIMATORS) == {"gae", "skip_obs_gae", "turn_gae", "pact"}
    assert set(A.CRITIC_LOSSES) == {"mse", "bce"}
    assert set(A.KL) == {"k1", "k2", "k3"}
    assert set(A.AGGREGATIONS) == {
        "token-mean",
        "seq-mean-token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-sum-norm",
        "dr_grpo",
    }
