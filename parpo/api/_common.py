"""What every ``parpo.api`` job shares: a config given as a preset name, a YAML file or a
config object, and training calls that leave the process environment as they found it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from parpo_core.errors import UserError

#: A config: a preset name (``"dice"``), a YAML file, a validated config object, or None (the
#: group's default preset).
Config = str | Path | BaseModel | None


def config_of(group: str, config: Config, overrides: list[str] | None = None) -> Any:
    """The validated config of ``group`` (``configs/<group>/``) that ``config`` and the dotted
    ``overrides`` describe; a config object is used as it is (overrides go with names only)."""
    from parpo.api.configs import resolved

    if isinstance(config, BaseModel):
        if overrides:
            raise UserError(
                "overrides go with a preset name or a YAML file; change the config object instead"
            )
        return config
    return resolved(group, None if config is None else str(config), overrides)


def preset_label(config: Config, default: str) -> str:
    """The preset name recorded in a version's training summary (a file's stem, the default's name)."""
    if config is None or isinstance(config, BaseModel):
        return default
    return Path(str(config)).stem


@contextmanager
def environment_kept(*names: str) -> Iterator[None]:
    """Run a block that exports ``names`` (the run-folder handshake of ``parpo_core.runs``, which
    DDP ranks started inside the block read) and put them back as they were after it."""
    before = {n: os.environ.get(n) for n in names}
    try:
        yield
    finally:
        for n, v in before.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
