"""Config groups: presets state decisions only, the reference page is current, show and schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from parpo.api.configs import CONFIG_GROUPS, config_model, reference_markdown, resolved, schema
from parpo.cli.main import app
from parpo.presets import preset_names, read_preset

DOC = Path(__file__).resolve().parents[3] / "docs" / "config-reference.md"


def _leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "weights":
            out |= _leaves(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_the_reference_page_is_generated_from_the_models():
    assert DOC.read_text() == reference_markdown(), (
        "stale: run `parpo config reference > docs/config-reference.md`"
    )


@pytest.mark.parametrize("group", ["data", "reward", "policy", "serve"])
def test_presets_hold_only_what_they_change(group: str):
    for name in preset_names(group):
        data = read_preset(group, name)[1]
        defaults = _leaves(config_model(group, data.get("backend"))().model_dump(mode="json"))
        changed = _leaves(data)
        # ``backend`` selects the model, so a preset names it even where it is that model's default
        same = [k for k, v in changed.items() if defaults.get(k) == v and k != "backend"]
        assert same == [], f"configs/{group}/{name}.yaml repeats defaults: {same}"


def test_every_config_field_is_described():
    rows = [line for line in reference_markdown().splitlines() if line.startswith("| `")]
    assert len(rows) > 150 and [r for r in rows if r.endswith("|  |")] == []


def test_show_applies_overrides_and_schema_is_the_models():
    assert resolved("reward", None, ["train.epochs=7"]).train.epochs == 7
    assert resolved("reward").stage1.enabled is True  # the dice preset's one decision
    assert schema("serve")["title"] == "ServeConfig" and set(CONFIG_GROUPS) == {
        "data",
        "reward",
        "policy",
        "serve",
    }
    res = CliRunner().invoke(app, ["config", "show", "policy", "train.updates=3"])
    assert res.exit_code == 0 and "updates: 3\n" in res.output


def test_dr_grpo_means_the_same_from_yaml_overrides_and_the_flag():
    from parpo.cli.policy import load_config
    from parpo.policy.tokens import HEAD

    via_flag = load_config("default", "dr_grpo", None, None)
    via_override = resolved("policy", None, ["advantage.estimator=dr_grpo"])
    assert via_flag == via_override
    assert (via_flag.loss.aggregation, via_flag.loss.norm_len) == ("dr_grpo", HEAD + via_flag.policy.max_k)
    explicit = resolved("policy", None, ["advantage.estimator=dr_grpo", "loss.aggregation=token-mean"])
    assert explicit.loss.aggregation == "token-mean"  # an explicit choice wins
