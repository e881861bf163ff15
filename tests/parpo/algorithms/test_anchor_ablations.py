"""Issue 17's ablations of PARPO's anchor: ``advantage.anchor_terms`` (baseline only, scale only)
and ``gdpo_user`` (GDPO with the preference normalised per user in the batch), on hand-computed
numbers (the PARPO hand example of ``test_advantage_estimators``)."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from parpo.algorithms import ADVANTAGES, AdvantageConfig, AnchorSnapshot
from parpo.algorithms.config import ValueConfig, select_value
from tests.parpo.algorithms.test_advantage_estimators import (
    PARPO_ANCHORS,
    PARPO_GROUP,
    PARPO_REWARDS,
    PARPO_USER,
    close,
    t,
)

W = {"task/a": 1.0, "preference": 1.0}
# PARPO (both terms) on the hand example: group 0's b is the anchor's, group 2's s is the anchor's.
PREF0 = [-2.2361, -1.3416, -0.4472, 0.4472]  # group 0: (r - .7) / std_g .22361
BOTH = [1 + PREF0[0], -1 + PREF0[1], -1 + PREF0[2], 1 + PREF0[3], 0, -2, 0, 2, 0.75, -1.25, -0.75, 1.25]


def _parpo(terms: str) -> tuple[torch.Tensor, dict[str, float]]:
    cfg = AdvantageConfig(weights=W, anchor_terms=terms)
    return ADVANTAGES["parpo"](PARPO_REWARDS, PARPO_GROUP, PARPO_USER, PARPO_ANCHORS, cfg)


def test_both_terms_is_parpo() -> None:
    adv, _ = _parpo("both")
    close(adv, BOTH, 1e-4)


def test_baseline_only_keeps_the_anchor_baseline_and_the_group_std() -> None:
    adv, m = _parpo("baseline")
    # group 0: b = max(.5, .7) = .7 and std_g binds anyway -> as PARPO
    # group 2: b = max(.05, -.2) = .05, s = std_g = .05 (not sigma_u = .2) -> [-1, -1, 1, 1]
    close(adv, BOTH[:8] + [0, -2, 0, 2], 1e-4)
    assert m["preference/frac_anchor_baseline"] == pytest.approx(4 / 12)
    assert m["preference/frac_anchor_scale"] == 0.0


def test_scale_only_keeps_the_group_mean_and_the_anchor_scale() -> None:
    adv, m = _parpo("scale")
    # group 0: b = mean_g .5, s = max(.22361, .1, .09) -> plain [-1.3416, -.4472, .4472, 1.3416]
    # group 2: b = .05 (the group mean bound there already), s = sigma_u .2 -> as PARPO
    close(adv, [-0.3416, -1.4472, -0.5528, 2.3416] + BOTH[4:], 1e-4)
    assert m["preference/frac_anchor_baseline"] == 0.0
    assert m["preference/frac_anchor_scale"] == pytest.approx(4 / 12)


def test_baseline_only_has_no_kappa_floor() -> None:
    # a zero-std group under a higher anchor: PARPO divides by the anchor scale .1 (-6), the
    # baseline-only ablation by eps
    pref = {"preference": t(0.2, 0.2, 0.2, 0.2)}
    snap = AnchorSnapshot.from_lists([0.9], [0.01], [4])
    g, u = torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long)
    adv, _ = ADVANTAGES["parpo"](
        pref, g, u, snap, AdvantageConfig(n_min=1, eps=1e-3, anchor_terms="baseline")
    )
    close(adv, [-0.6 / 1e-3] * 4, 1e-6)


def test_anchor_terms_is_validated_and_rejected_where_it_would_be_ignored() -> None:
    with pytest.raises(ValidationError, match="anchor_terms"):
        AdvantageConfig(anchor_terms="mean")
    adv = AdvantageConfig(estimator="gae", anchor_terms="scale")
    with pytest.raises(ValueError, match="anchor_terms scale"):
        select_value(adv, ValueConfig(), False, "joint")
    # a plain (unanchored) critic never reads the anchor, so there is nothing to ignore
    assert select_value(adv, ValueConfig(anchored=False), False, "joint").estimator == "gae"


def test_gdpo_user_normalises_the_preference_over_the_users_rollouts_in_the_batch() -> None:
    # user 0 has groups 3 and 5, user 1 group 9
    group = torch.tensor([3, 3, 5, 5, 9, 9])
    user = torch.tensor([0, 0, 0, 0, 1, 1])
    rewards = {"task/a": t(1, 0, 0, 1, 1, 1), "preference": t(0, 1, 2, 3, 5, 7)}
    cfg = AdvantageConfig(weights=W, whiten=False)
    adv, m = ADVANTAGES["gdpo_user"](rewards, group, user, None, cfg)
    # task/a per group: [1, -1], [-1, 1], std 0 -> [0, 0]
    # preference per user: user 0 [0, 1, 2, 3] mean 1.5 std 1.1180 -> [-1.3416, -.4472, .4472, 1.3416];
    # user 1 [5, 7] mean 6 std 1 -> [-1, 1]  (GDPO would give [-1, 1] in every group)
    close(adv, [-0.3416, -1.4472, -0.5528, 2.3416, -1, 1], 1e-4)
    assert m["preference/frac_user_pooled"] == pytest.approx(4 / 6)
    gdpo, _ = ADVANTAGES["gdpo"](rewards, group, user, None, cfg)
    close(gdpo, [0, 0, -2, 2, -1, 1], 1e-4)


def test_gdpo_user_equals_gdpo_when_every_user_has_one_group() -> None:
    adv, m = ADVANTAGES["gdpo_user"](
        PARPO_REWARDS, PARPO_GROUP, PARPO_USER, PARPO_ANCHORS, AdvantageConfig(weights=W)
    )
    ref, _ = ADVANTAGES["gdpo"](PARPO_REWARDS, PARPO_GROUP, PARPO_USER, None, AdvantageConfig(weights=W))
    close(adv, ref.tolist(), 1e-12)
    assert m["preference/frac_user_pooled"] == 0.0
