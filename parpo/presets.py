"""YAML presets -> validated pydantic configs, with dotted ``key=value`` overrides.

A config is named by a preset (``dice`` -> ``configs/<group>/dice.yaml``,
shipped as package data of ``parpo.configs``) or by a path to a YAML file.
Overrides on the command line win over the file. Every error names the file
and the key: ``configs/reward/dice.yaml: unknown key 'embeding_dim' (did you
mean 'embedding_dim'?)``.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from parpo_core.durable import atomic_write_bytes
from parpo_core.errors import UserError

M = TypeVar("M", bound=BaseModel)


class ConfigError(UserError):
    """A bad config file, preset name or override (one readable line)."""


def preset_names(group: str) -> list[str]:
    root = resources.files("parpo.configs") / group
    return (
        sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))
        if root.is_dir()
        else []
    )


def read_preset(group: str, name: str) -> tuple[str, dict[str, Any]]:
    """(label for messages, raw mapping) of a preset name or a YAML path."""
    path = Path(name)
    if name.endswith((".yaml", ".yml")) or path.exists():
        if not path.is_file():
            raise ConfigError(f"{name}: no such config file")
        label, text = str(path), path.read_text()
    else:
        res = resources.files("parpo.configs") / group / f"{name}.yaml"
        if not res.is_file():
            known = preset_names(group)
            hint = difflib.get_close_matches(name, known, n=1)
            did = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise ConfigError(f"unknown {group} preset '{name}'{did}; presets: {', '.join(known) or 'none'}")
        label, text = f"configs/{group}/{name}.yaml", res.read_text()
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{label}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: a config file is a YAML mapping of keys to values")
    return label, data


def parse_override(text: str) -> tuple[list[str], Any]:
    """``a.b=3`` -> (["a", "b"], 3); the value is parsed as YAML (numbers, lists, null...)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override '{text}' is not key=value (e.g. runtime.seed=1)")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return key.strip().split("."), parsed


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    out = _deep_copy(data)
    for text in overrides:
        keys, value = parse_override(text)
        node = out
        for k in keys[:-1]:
            child = node.get(k)
            if not isinstance(child, dict):
                child = {}
                node[k] = child
            node = child
        node[keys[-1]] = value
    return out


def _deep_copy(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in d.items()}


def validate(model: type[M], data: dict[str, Any], label: str) -> M:
    """Validate ``data`` against ``model``; the first error becomes one line naming the key."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(p) for p in err["loc"]]
        key = ".".join(loc)
        if err["type"] == "extra_forbidden":
            parent = model
            for p in loc[:-1]:
                field = parent.model_fields.get(p) if isinstance(parent, type) else None
                ann = getattr(field, "annotation", None)
                parent = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
                if parent is None:
                    break
            fields = list(parent.model_fields) if parent else []
            hint = difflib.get_close_matches(loc[-1], fields, n=1)
            did = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise ConfigError(f"{label}: unknown key '{key}'{did}") from None
        if not loc:  # a check across keys (a model validator): its message names the keys
            raise ConfigError(f"{label}: {err['msg'].removeprefix('Value error, ')}") from None
        raise ConfigError(f"{label}: {key}: {err['msg']} (got {err.get('input')!r})") from None


def load(model: type[M], group: str, name: str | None, overrides: list[str] | None = None) -> M:
    """Preset or file ``name`` (or the model's defaults), then overrides, validated."""
    label, data = read_preset(group, name) if name else ("defaults", {})
    data = apply_overrides(data, overrides or [])
    if overrides:
        label = f"{label} (with overrides)"
    return validate(model, data, label)


def write_resolved(cfg: BaseModel, path: Path) -> None:
    """Write the resolved config beside a run's outputs (atomically)."""
    text = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
    atomic_write_bytes(path, text.encode())
