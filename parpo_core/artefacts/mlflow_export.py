"""Mirror registry versions into an MLflow model registry (``parpo registry export --mlflow URI``).

The folder registry stays the source of truth; MLflow gets a copy people can browse:

- one registered model per kind, ``parpo-<kind>``;
- per version, one run in the experiment ``parpo-registry`` (run name = the version name) with the
  lineage as parameters and the numeric entries of ``metrics.json`` as metrics (``.``-joined
  names), and one model version whose ``source`` is the version folder and whose tags are the
  lineage (``parpo.version``, ``parpo.parent``, ``parpo.reward``, ``parpo.data_fingerprint``, ...);
- aliases = pointers: ``production`` and the registry's own aliases point at the matching model
  versions after every export (moved when a pointer moved, removed when gone); MLflow reserves
  ``latest`` for its newest model version, which is the registry's ``latest`` (export follows
  publish order).

Idempotent: a version already exported (found by its ``parpo.version`` tag) is not exported
again. MLflow's model registry needs a database URI (``sqlite:///reg.db``, a server); mlflow is
imported only here, from the ``mlflow`` extra.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from parpo_core.errors import UserError
from parpo_core.trackers import flatten

if TYPE_CHECKING:
    from parpo_core.artefacts.registry import Registry

EXPERIMENT = "parpo-registry"


@dataclass
class Exported:
    """What one export did for one kind."""

    kind: str
    model: str
    new: list[str] = field(default_factory=list)  # version names exported now
    kept: int = 0  # versions already there
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> MLflow model version


def metric_name(key: str) -> str:
    """An MLflow-valid metric name: ``test.ndcg@10`` -> ``test.ndcg_at_10`` (MLflow allows letters,
    digits and ``_-. :/`` only)."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", key.replace("@", "_at_"))


def _client(uri: str) -> Any:
    if importlib.util.find_spec("mlflow") is None:
        raise UserError("registry export --mlflow: mlflow is not installed; pip install 'parpo[mlflow]'")
    if not uri.startswith(("sqlite:", "postgresql", "mysql", "mssql", "http:", "https:", "databricks")):
        raise UserError(
            f"registry export --mlflow {uri}: MLflow's model registry needs a database or a server "
            "(e.g. sqlite:///mlflow.db or http://host:5000)"
        )
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def export_kind(reg: Registry, kind: str, uri: str) -> Exported:
    """Export every version of ``kind`` not yet in MLflow, then set the aliases (module docstring)."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    client = _client(uri)
    name = f"parpo-{kind}"
    try:
        client.get_registered_model(name)
    except MlflowException:
        client.create_registered_model(name, tags={"parpo.kind": kind}, description=f"parpo {kind} versions")
    have = {mv.tags.get("parpo.version"): mv.version for mv in client.search_model_versions(f"name='{name}'")}
    exp = client.get_experiment_by_name(EXPERIMENT)
    exp_id = exp.experiment_id if exp is not None else client.create_experiment(EXPERIMENT)
    done = Exported(kind, name)
    for info in reg.list_versions(kind):
        if info.name in have:
            done.kept += 1
            continue
        v = reg.open(kind, info.name, verify=False)
        lineage = flatten(v.lineage.model_dump(mode="json"))
        tags = {f"parpo.{k}": str(val) for k, val in lineage.items() if val is not None}
        tags["parpo.version"] = info.name
        run = client.create_run(
            exp_id, run_name=info.name, tags={"parpo.kind": kind, "parpo.version": info.name}
        )
        for k, val in lineage.items():
            client.log_param(run.info.run_id, k, str(val)[:MAX_PARAM_VAL_LENGTH])
        for k, val in flatten(v.metrics or {}).items():
            if isinstance(val, int | float) and not isinstance(val, bool) and val == val:
                client.log_metric(run.info.run_id, metric_name(k), float(val))
        client.set_terminated(run.info.run_id)
        mv = client.create_model_version(
            name, source=str(v.path.resolve()), run_id=run.info.run_id, tags=tags
        )
        have[info.name] = mv.version
        done.new.append(info.name)
    current = client.get_registered_model(name).aliases or {}
    pointers = reg.aliases(kind)
    for alias, version in pointers.items():
        # MLflow reserves "latest": its own latest is the newest model version, which is ours
        if version in have and alias != "latest":
            client.set_registered_model_alias(name, alias, have[version])
            done.aliases[alias] = str(have[version])
    for alias in set(current) - set(pointers):  # a pointer removed from the folder registry
        client.delete_registered_model_alias(name, alias)
    return done
