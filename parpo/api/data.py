"""Datasets: ``ingest`` a log, ``synth`` a synthetic world (the jobs of ``parpo data ingest`` and
``parpo data synth``, which call these)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parpo.api._common import Config, config_of


@dataclass(frozen=True)
class DataResult:
    """A dataset folder written (or appended to): its ``summary.json`` as a dict and the split
    folders cut in it, by name (empty when splits were not asked for)."""

    path: Path
    summary: dict[str, Any]
    splits: dict[str, Path] = field(default_factory=dict)

    @property
    def unchanged(self) -> bool:
        """True when the input had been ingested already (same sha256): nothing was written."""
        return bool(self.summary.get("noop"))


def ingest(
    *,
    source: str,
    input: str | Path,
    out: str | Path,
    map: str | Path | None = None,
    splits: bool = True,
    config: Config = None,
    overrides: list[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> DataResult:
    """Ingest ``input`` (a file or folder in the ``source`` adapter's format: ``taobao``,
    ``movielens``, ``parpo-events``, ``canonical`` with ``map``, ...) into the dataset folder
    ``out``, created or appended to in one transaction; bad lines go to ``out/rejects/`` with a
    reason. ``config`` is a ``data`` preset (its ``split`` section says how splits are cut);
    ``progress(n)`` is called with the rows read as they are read."""
    from data_pipelines.adapters import open_source
    from data_pipelines.ingest import ingest as run_ingest
    from parpo.presets import write_resolved

    cfg = config_of("data", config, overrides)
    out = Path(out)
    summary = run_ingest(
        open_source(source, Path(input), None if map is None else Path(map)), out, progress=progress
    )
    if summary.get("noop"):
        return DataResult(out, summary)
    write_resolved(cfg, out / "config.yaml")
    return DataResult(out, summary, write_splits(out, cfg) if splits else {})


def synth(
    *,
    out: str | Path,
    users: int | None = None,
    items: int | None = None,
    rounds: int | None = None,
    seed: int | None = None,
    splits: bool = True,
    config: Config = None,
    overrides: list[str] | None = None,
) -> DataResult:
    """Synthesise a log with known interest and conformity into the new dataset folder ``out``
    (``truth/`` and ``uniform_test/`` included; docs/synthetic.md). ``users``, ``items``,
    ``rounds`` and ``seed`` set ``synth.n_users``, ``synth.n_items``, ``synth.rounds``,
    ``synth.seed`` of the ``data`` config."""
    from data_pipelines import synth as gen
    from parpo.presets import write_resolved

    flags = [
        f"synth.{k}={v}"
        for k, v in (("n_users", users), ("n_items", items), ("rounds", rounds), ("seed", seed))
        if v is not None
    ]
    cfg = config_of("data", config, [*(overrides or []), *flags] or None)
    out = Path(out)
    summary = gen.write(cfg.synth, out, splits=False)
    write_resolved(cfg, out / "config.yaml")
    return DataResult(out, summary, write_splits(out, cfg) if splits else {})


def write_splits(out: Path, cfg: Any) -> dict[str, Path]:
    """Every split applicable to the dataset ``out``, cut as the data config ``cfg`` says."""
    from data_pipelines.dataset import Dataset
    from data_pipelines.splits import write_all

    s = cfg.split
    return write_all(Dataset(out), seed=s.seed, rule=s.positives, algorithm=s.algorithm)
