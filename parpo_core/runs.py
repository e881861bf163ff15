"""Run folders, and the handshake that gives DDP ranks started by a launcher the same one.

Rank 0 picks the folder (given, or a fresh ``runs/<kind>-<time>-<id>``) and exports
it as ``PARPO_<KIND>_RUN_DIR``; the ranks the launcher starts later inherit the
environment and read it back, so every rank writes checkpoints and logs in one place.
"""

from __future__ import annotations

import os
import secrets
from datetime import UTC, datetime
from pathlib import Path


def default_run_dir(kind: str) -> Path:
    """A fresh ``runs/<kind>-<time>-<id>`` folder name for a training run."""
    return Path("runs") / f"{kind}-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def run_dir_env(kind: str) -> str:
    """The environment variable that carries ``kind``'s run folder to the DDP ranks."""
    return f"PARPO_{kind.upper()}_RUN_DIR"


def resolve_run_dir(kind: str, run_dir: str | Path | None = None) -> Path:
    """The run folder of this process: ``run_dir``, else (on a rank a DDP launcher started)
    the folder rank 0 exported, else a fresh default; exported for ranks started later."""
    env = run_dir_env(kind)
    if run_dir is None and os.environ.get("LOCAL_RANK", "0") != "0":
        run_dir = os.environ.get(env)
    run = Path(run_dir or default_run_dir(kind))
    os.environ[env] = str(run.resolve())
    return run


def is_rank_zero() -> bool:
    """Whether this process is the first rank of the first node (the one that prints and publishes)."""
    return os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0"
