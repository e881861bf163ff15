"""The env config (the ``env`` section of the ``policy`` group): the preset keeps its defaults;
bad keys and weights are one-line errors."""

from __future__ import annotations

import pytest

from parpo.env import EnvConfig
from parpo.presets import ConfigError, load


def test_the_policy_preset_keeps_the_env_defaults():
    from parpo.trainer.config import PolicyTrainConfig

    assert load(PolicyTrainConfig, "policy", "default").env == EnvConfig()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("max_step=3", "unknown key 'max_step' (did you mean 'max_steps'?)"),
        ("task_weights.constraints=0.9", "must sum to 1"),
        ("task_weights.speed=0.0", "unknown component(s) ['speed']"),
        ("tasks.price_cap.low=2.0", "low (2.0) is above high (1.5)"),
        ("k=101", "k: Input should be less than or equal to 100"),
    ],
)
def test_bad_config_names_the_key(override, message):
    with pytest.raises(ConfigError) as e:
        load(EnvConfig, "env", None, [override])
    assert message in str(e.value)
