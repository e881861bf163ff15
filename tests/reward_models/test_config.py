"""The reward config's derived values: the batch and the evaluation interval `auto` picks, and their validation."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from reward_models.config import TrainConfig


@pytest.mark.parametrize(
    ("positives", "batch"),
    [
        (7448, 1024),  # the synthetic default: 931 -> 1024 (also the floor)
        (500, 1024),  # tiny: the floor
        (23_000, 2048),  # 2875: log2 11.49 -> 2048
        (24_000, 4096),  # 3000: log2 11.55 -> 4096
        (51_194, 8192),  # ML-100K: 6399, log2 12.64 -> 8192
        (232_290, 8192),  # a real catalogue: the ceiling
    ],
)
def test_auto_batch_is_the_power_of_two_nearest_an_eighth_of_the_positives(positives, batch):
    assert TrainConfig(batch_size="auto").batch_for(positives) == batch


def test_a_set_batch_is_kept_whatever_the_data():
    assert TrainConfig(batch_size=128).batch_for(51_194) == 128


@pytest.mark.parametrize("bad", [0, -3, "big", 2.5, True])
def test_a_bad_batch_is_one_message_naming_both_forms(bad):
    with pytest.raises(ValidationError, match="must be a positive integer or auto") as e:
        TrainConfig(batch_size=bad)
    assert e.value.error_count() == 1


@pytest.mark.parametrize(
    ("positives", "every"),
    [
        (7448, 10),  # the synthetic default: 8 steps an epoch at 1024
        (51_194, 10),  # ML-100K: 7 steps at 8192
        (655_360, 10),  # 80 steps an epoch: an eighth is 10
        (655_361, 11),  # 81 steps: an eighth rounds up
        (1_239_332, 19),  # the 1M-positives world: 152 steps
        (6_200_000, 95),  # 6.2M: 757 steps
    ],
)
def test_auto_evaluates_every_10_steps_or_every_eighth_of_an_epoch(positives, every):
    assert TrainConfig(batch_size="auto", eval_every_steps="auto").eval_steps_for(positives) == every


def test_a_set_evaluation_interval_is_kept_and_0_means_per_epoch():
    assert TrainConfig(eval_every_steps=7).eval_steps_for(6_200_000) == 7
    assert TrainConfig(eval_every_steps=0).eval_steps_for(6_200_000) == 0


@pytest.mark.parametrize("bad", [-1, "often", 2.5, True])
def test_a_bad_evaluation_interval_is_one_message_naming_both_forms(bad):
    with pytest.raises(ValidationError, match="must be a non-negative integer or auto") as e:
        TrainConfig(eval_every_steps=bad)
    assert e.value.error_count() == 1
