"""``parpo registry export --mlflow``: versions, lineage, metrics and pointers in an MLflow model
registry (a local sqlite database), idempotent, following pointer moves."""

from __future__ import annotations

import pytest

from parpo_core.artefacts import Registry
from parpo_core.artefacts.mlflow_export import export_kind, metric_name
from parpo_core.errors import UserError
from tests.plugins.artefacts import publish


def test_metric_names_are_what_mlflow_accepts():
    assert metric_name("test.ndcg@10") == "test.ndcg_at_10"
    assert metric_name("report/hit@10 (warm)") == "report/hit_at_10 _warm_"  # no brackets in MLflow
    assert metric_name("a|b") == "a_b"


def test_export_mirrors_versions_lineage_metrics_and_pointers(reg: Registry, tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    r1, r2 = (publish(reg, tag=t).name for t in "ab")
    reg.set_alias("reward", "staging", r2)
    done = export_kind(reg, "reward", uri)
    assert done.new == [r1, r2] and done.kept == 0
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    versions = {mv.tags["parpo.version"]: mv for mv in client.search_model_versions("name='parpo-reward'")}
    assert set(versions) == {r1, r2}
    mv = versions[r1]
    assert mv.source == str((reg.root / "reward" / r1).resolve())
    assert mv.tags["parpo.data_fingerprint"] == reg.open("reward", r1, verify=False).lineage.data_fingerprint
    run = client.get_run(mv.run_id)
    assert run.info.run_name == r1 and run.data.metrics["test.ndcg_at_10"] == 0.5  # metrics.json of the fake
    model = client.get_registered_model("parpo-reward")
    assert model.aliases == {"production": versions[r1].version, "staging": versions[r2].version}

    # again: nothing new; then pointers move and an alias goes: MLflow follows
    assert export_kind(reg, "reward", uri).new == []
    reg.point("reward", "production", r2)
    reg.remove_alias("reward", "staging")
    r3 = publish(reg, tag="c").name
    done = export_kind(reg, "reward", uri)
    assert done.new == [r3] and done.kept == 2
    assert client.get_registered_model("parpo-reward").aliases == {"production": versions[r2].version}


def test_a_folder_uri_is_one_line_naming_what_the_model_registry_needs(reg: Registry, tmp_path):
    publish(reg, tag="a")
    with pytest.raises(UserError, match="needs a database or a server"):
        export_kind(reg, "reward", str(tmp_path / "mlruns"))
