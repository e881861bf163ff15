"""Config groups as data: the model behind each ``configs/<group>/`` folder, the resolved config
of a preset plus overrides, its JSON Schema, and the reference page generated from the models'
``Field`` descriptions (``docs/config-reference.md``; a test fails when it is stale).

Defaults live in the models; a preset holds only what it changes.
"""

from __future__ import annotations

import importlib
import json
from typing import Any, get_args

from pydantic import BaseModel

from parpo_core.names import NameRegistry

#: Group -> ``module:Class`` of its config model (imported on demand: torch stays out).
CONFIG_GROUPS: NameRegistry[str] = NameRegistry("config group")
for _group, _target in (
    ("data", "data_pipelines.data_config:DataConfig"),
    ("reward", "reward_models.config:RewardConfig"),
    ("policy", "parpo.trainer.config:PolicyTrainConfig"),
    ("serve", "serving.config:ServeConfig"),
):
    CONFIG_GROUPS.add(_group, _target)

#: ``policy`` configs whose ``backend`` names another trainer: backend -> ``module:Class``.
POLICY_BACKEND_MODELS = {"llm": "parpo.policy.llm.config:LLMTrainConfig"}

#: The preset each command reads when ``--config`` is not given.
DEFAULT_PRESET = {"data": "default", "reward": "dice", "policy": "default", "serve": "default"}


def config_model(group: str, backend: str | None = None) -> type[BaseModel]:
    """The group's config model; for ``policy``, the one of ``backend`` (None: the native one)."""
    target = CONFIG_GROUPS[group]
    if group == "policy" and backend in POLICY_BACKEND_MODELS:
        target = POLICY_BACKEND_MODELS[backend]
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def preset_backend(group: str, preset: str, overrides: list[str] | None = None) -> str | None:
    """The ``backend`` a ``policy`` preset (or a ``backend=`` override) names; None elsewhere."""
    from parpo.presets import parse_override, read_preset

    if group != "policy":
        return None
    given = [parse_override(o)[1] for o in overrides or [] if o.partition("=")[0].strip() == "backend"]
    return str(given[-1]) if given else read_preset(group, preset)[1].get("backend")


def resolved(group: str, preset: str | None = None, overrides: list[str] | None = None) -> BaseModel:
    """The validated config of ``preset`` (default: the group's default preset) plus ``overrides``;
    a ``policy`` preset with ``backend: llm`` is an ``LLMTrainConfig``."""
    from parpo.presets import load

    name = preset or DEFAULT_PRESET[group]
    return load(config_model(group, preset_backend(group, name, overrides)), group, name, overrides)


def schema(group: str) -> dict[str, Any]:
    """The JSON Schema of the group's config model (what an editor can validate YAML against)."""
    return config_model(group).model_json_schema()


def _rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, description) of every leaf field, in declaration order."""
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += _rows(ann, f"{prefix}{name}.")
            continue
        default = field.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump(mode="json")
        shown = json.dumps(default, default=str) if not isinstance(default, str) else default
        kind = str(ann).replace("typing.", "") if not isinstance(ann, type) else ann.__name__
        out.append(
            (
                f"{prefix}{name}",
                kind.replace("|", "\\|"),
                shown,
                (field.description or "").replace("|", "\\|"),
            )
        )
        # an optional section (``X | None``, off by default): its keys when it is set
        inner = [a for a in get_args(ann) if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(inner) == 1:
            out += _rows(inner[0], f"{prefix}{name}.")
    return out


def reference_markdown() -> str:
    """``docs/config-reference.md``: every key of every group with its type, default and meaning."""
    from parpo.presets import preset_names, read_preset

    lines = [
        "# Config reference",
        "",
        "Generated from the config models' `Field` descriptions by `parpo config reference`; do not edit",
        "(a test fails when this page and the models disagree). `parpo config show GROUP [--config NAME]",
        "[KEY=VALUE ...]` prints a resolved config, `parpo config schema GROUP` its JSON Schema.",
        "",
    ]
    for group in CONFIG_GROUPS.names():
        model = config_model(group)
        lines += [f"## `{group}` ({CONFIG_GROUPS[group].replace(':', '.')})", ""]
        for name in preset_names(group):
            changed = read_preset(group, name)[1]
            keys = ", ".join(f"`{k}`" for k in _flat_keys(changed)) or "nothing (the defaults)"
            lines.append(f"- preset `{name}` changes: {keys}")
        lines += ["", "| key | type | default | meaning |", "|---|---|---|---|"]
        lines += [f"| `{k}` | `{t}` | `{d}` | {m} |" for k, t, d, m in _rows(model)]
        lines.append("")
        if group == "policy":
            for backend, target in POLICY_BACKEND_MODELS.items():
                lines += [f"### `policy` with `backend: {backend}` ({target.replace(':', '.')})", ""]
                lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
                rows = _rows(config_model(group, backend))
                lines += [f"| `{k}` | `{t}` | `{d}` | {m} |" for k, t, d, m in rows]
                lines.append("")
    return "\n".join(lines)


def _flat_keys(d: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in d.items():
        out += _flat_keys(v, f"{prefix}{k}.") if isinstance(v, dict) and k != "weights" else [f"{prefix}{k}"]
    return out
