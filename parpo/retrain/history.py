"""The chain of versions of every kind with their parents, data, gate decisions and key metrics
(``parpo registry history``).

A version's gate decision comes from the retrain that produced it (``REG/retrain/*/``): the
``outcome`` record's status (``promoted``, ``gated``), else ``unfinished`` while its run has no
outcome yet; versions trained by hand have none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from parpo.retrain.journal import FOLDER, journals
from parpo_core.artefacts import KINDS, Registry


def gate_decisions(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, version) -> the gate decision of the retrain that produced it."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for j in journals(root):
        outcome, gate = j.read("outcome"), j.read("gate")
        for kind in ("reward", "policy"):
            rec = j.read(kind)
            if rec is None:
                continue
            out[(kind, rec["version"])] = {
                "retrain": j.key,
                "status": outcome["status"] if outcome else "unfinished",
                "passed": gate["passed"] if gate else None,
                "why": gate["why"] if gate else [],
                "heldout": gate["heldout"] if gate else None,
            }
    return out


def history(registry: Path) -> list[dict[str, Any]]:
    """Every version of every kind, in publish order per kind (see the module docstring)."""
    reg = Registry(registry)
    gates = gate_decisions(registry / FOLDER)
    rows = []
    for kind in KINDS.names():
        if not reg.kind_dir(kind).is_dir():
            continue
        for info in reg.list_versions(kind):
            rows.append(
                {
                    "kind": kind,
                    "version": info.name,
                    "pointers": info.aliases,
                    "published": info.published,
                    "parent": info.parent,
                    "data_fingerprint": info.data_fingerprint,
                    "gate": gates.get((kind, info.name)),
                    "metrics": info.metrics,
                    "metrics_source": info.metrics_source,
                    "problem": info.problem,
                }
            )
    return rows
