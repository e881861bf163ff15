"""Named aliases beside latest/production, and listings by each kind's own metrics."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from parpo.cli.main import app
from parpo_core.artefacts import Registry, RegistryError
from tests.plugins.artefacts import FP, lineage, publish


def test_alias_set_resolve_history_and_remove(reg: Registry):
    v1, v2 = (publish(reg, tag=t).name for t in "ab")
    assert reg.set_alias("reward", "challenger", "1") == v1
    assert reg.resolve("reward", "challenger").name == v1
    assert reg.set_alias("reward", "challenger", "latest") == v2
    ptr = reg.pointer("reward", "challenger")
    assert (ptr["version"], ptr["previous"], ptr["pointer"]) == (v2, [v1], "challenger")
    assert reg.aliases("reward") == {"production": v1, "latest": v2, "challenger": v2}
    infos = {i.name: i.aliases for i in reg.list_versions("reward")}
    assert infos == {v1: ["production"], v2: ["latest", "challenger"]}
    assert reg.remove_alias("reward", "challenger") == v2
    assert "challenger" not in reg.aliases("reward")
    with pytest.raises(RegistryError, match="no version 'challenger'"):
        reg.resolve("reward", "challenger")
    with pytest.raises(RegistryError, match="no alias 'challenger' to remove"):
        reg.remove_alias("reward", "challenger")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("latest", "reserved \\(publish moves it\\)"),
        ("production", "reserved \\(use `parpo registry promote`\\)"),
        ("Staging", "must match"),
        ("v3", "not look like a version number"),
        ("a/b", "must match"),
    ],
)
def test_reserved_and_malformed_alias_names_are_refused(reg: Registry, name: str, message: str):
    publish(reg)
    with pytest.raises(RegistryError, match=message):
        reg.set_alias("reward", name, "latest")


def test_an_alias_is_only_set_on_an_intact_version(reg: Registry):
    v = publish(reg)
    (v.path / "stray.txt").write_text("x")
    with pytest.raises(RegistryError, match="corrupted version"):
        reg.set_alias("reward", "staging", v.name)
    assert reg.pointer("reward", "staging") is None


def test_cli_alias_set_list_rm(reg: Registry):
    v1 = publish(reg).name
    runner = CliRunner()
    res = runner.invoke(app, ["registry", "alias", "set", "staging", "1", "-r", str(reg.root)])
    assert res.exit_code == 0 and f"staging: reward/{v1} (was unset)" in res.output
    res = runner.invoke(app, ["registry", "list", "-r", str(reg.root), "--json"])
    assert json.loads(res.output)[0]["aliases"] == ["production", "latest", "staging"]
    res = runner.invoke(app, ["registry", "alias", "rm", "latest", "-r", str(reg.root)])
    assert res.exit_code == 1 and "reserved" in str(res.exception)  # main() prints it as one error line
    res = runner.invoke(app, ["registry", "alias", "rm", "staging", "-r", str(reg.root)])
    assert res.exit_code == 0 and f"removed alias staging (it named reward/{v1})" in res.output


def _policy(reg: Registry, tag: str, training: dict[str, float]):
    return publish(reg, "policy", tag=tag, metrics={"training": training}, lineage=lineage(reward=None))


def test_policy_listing_reads_its_newest_own_eval_else_training_means(reg: Registry):
    training = {"report/hit@10": 0.25, "report/task_quality": 0.5, "report/true_preference": 0.75}
    v = _policy(reg, "p", training)
    (info,) = reg.list_versions("policy")
    assert info.metrics_source == "training"
    assert info.metrics == {"hit@10": 0.25, "task_quality": 0.5, "true_pref": 0.75}

    def result(hit: float) -> dict:
        return {
            "greedy": True,
            "warm": {"policy": {"hit@10": hit, "task_quality": 1.0, "true_preference": 0.5}},
            "cold": {"policy": {"hit@10": hit / 2, "true_preference": 0.25}},
        }

    old = reg.add_eval("policy", v.name, FP, "temporal", {"seed": 0}, result(0.4))
    os.utime(old, (1, 1))  # older than the next one
    reg.add_eval("policy", v.name, FP, "temporal", {"seed": 1}, result(0.6))
    reg.add_eval("policy", v.name, "f" * 64, "temporal", {"seed": 2}, result(0.9))  # other data: ignored
    reg.add_eval("policy", v.name, FP, "cold_users", {"seed": 3}, result(0.8))  # other split: ignored
    (info,) = reg.list_versions("policy")
    assert info.metrics_source == "eval greedy"
    assert info.metrics == {
        "hit@10": 0.6,
        "true_pref": 0.5,
        "task_quality": 1.0,
        "cold hit@10": 0.3,
        "cold true_pref": 0.25,
    }
    res = CliRunner().invoke(app, ["registry", "list", "-r", str(reg.root), "-k", "policy", "--json"])
    assert json.loads(res.output)[0]["metrics"]["hit@10"] == 0.6


def test_unknown_kind_is_one_line(reg: Registry):
    with pytest.raises(RegistryError, match="unknown registry kind 'memory'; choose one of policy, reward"):
        reg.versions("memory")
