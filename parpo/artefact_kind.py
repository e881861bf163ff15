"""The ``policy`` artefact kind: registry versions of agent policies, listed by how they act.

A policy's key metrics come from its newest evaluation on its own data and split
(``evals/``, written by ``parpo policy eval``): hit@10, true preference (where the
truth is known) and task quality on warm tasks, hit@10 and true preference on
cold ones. A version never evaluated shows its last training updates' means,
labelled ``training``.
"""

from __future__ import annotations

import json
from pathlib import Path

from parpo_core.artefacts.kinds import KindSpec, numbers, register_kind

KIND = "policy"
#: (column, part, metric): warm is the eval's ``warm`` section (or training), cold its ``cold`` one.
COLUMNS = (
    ("hit@10", "warm", "hit@10"),
    ("true_pref", "warm", "true_preference"),
    ("task_quality", "warm", "task_quality"),
    ("cold hit@10", "cold", "hit@10"),
    ("cold true_pref", "cold", "true_preference"),
)


def _newest_own_eval(path: Path) -> dict | None:
    """The newest eval of the version on the data and split it was trained on (None if none)."""
    try:
        lineage = json.loads((path / "lineage.json").read_text())
    except (OSError, ValueError):
        return None
    own = []
    for p in (path / "evals").glob("*.json") if (path / "evals").is_dir() else []:
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if (
            rec.get("data_fingerprint") == lineage.get("data_fingerprint")
            and rec.get("split") == (lineage.get("split") or {}).get("name")
            and isinstance(rec.get("result", {}).get("warm"), dict)
        ):
            own.append((p.stat().st_mtime, p.name, rec))
    return max(own, key=lambda t: t[:2])[2] if own else None


def read_policy_metrics(path: Path) -> tuple[dict[str, float], str | None]:
    rec = _newest_own_eval(path)
    if rec is not None:
        result = rec["result"]
        out = {}
        for col, part, metric in COLUMNS:
            value = numbers((result.get(part) or {}).get("policy"), (metric,)).get(metric)
            if value is not None:
                out[col] = value
        return out, f"eval {'greedy' if result.get('greedy', True) else 'sampled'}"
    try:
        training = json.loads((path / "metrics.json").read_text()).get("training") or {}
    except (OSError, ValueError):
        return {}, None
    out = {col: float(training[f"report/{m}"]) for col, part, m in COLUMNS
           if part == "warm" and isinstance(training.get(f"report/{m}"), int | float)}  # fmt: skip
    return out, "training" if out else None


SPEC = register_kind(
    KindSpec(
        KIND,
        "agent policies trained with PARPO and the other estimators",
        columns=tuple(c for c, _, _ in COLUMNS),
        read_metrics=read_policy_metrics,
    )
)
