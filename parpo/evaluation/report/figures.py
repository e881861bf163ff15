"""The report's figures as PNG bytes (matplotlib, Agg backend; imported inside each function so
importing the CLI stays light). A function returns None when it has no data to draw."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from parpo.evaluation.report.collect import PolicyData

DPI = 80


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def learning_curves(policies: list[PolicyData]) -> bytes | None:
    """Mean reward per component against the update, one panel per component, a line per version."""
    logs = [(p.name, p.log) for p in policies if p.log is not None and p.log.height]
    comps = sorted(
        {c for _, log in logs for c in log.columns if c.startswith("reward/") and c.endswith("/mean")}
    )
    if not comps:
        return None
    plt = _plt()
    cols = min(3, len(comps))
    rows = -(-len(comps) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False, layout="constrained")
    for ax, comp in zip(axes.flat, comps, strict=False):
        for name, log in logs:
            if comp in log.columns:
                ax.plot(log["update"].to_numpy(), log[comp].to_numpy(), marker="o", ms=3, label=name[:7])
        ax.set_title(comp.removeprefix("reward/").removesuffix("/mean"), fontsize=9)
        ax.set_xlabel("update", fontsize=8)
    for ax in list(axes.flat)[len(comps) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Mean reward per component during training", fontsize=10)
    return _png(fig)


def anchor_distributions(policies: list[PolicyData]) -> bytes | None:
    """Histograms of the users' anchor means and standard deviations (anchors.parquet)."""
    anchors = [(p.name, p.anchors) for p in policies if p.anchors is not None and p.anchors.height]
    if not anchors:
        return None
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3))
    for name, df in anchors:
        a.hist(df["mean"].to_numpy(), bins=20, alpha=0.5, label=f"{name[:7]} ({df.height} users)")
        b.hist(np.sqrt(df["var"].to_numpy()), bins=20, alpha=0.5, label=name[:7])
    a.set_title("anchor mean (preference)", fontsize=9)
    b.set_title("anchor standard deviation", fontsize=9)
    a.legend(fontsize=7)
    return _png(fig)


def preference_vs_quality(policies: list[PolicyData]) -> bytes | None:
    """Warm-task preference against task quality: each version's policy and its baselines."""
    pts = [(p.name, p.eval) for p in policies if p.eval is not None and p.eval["warm"]["n_tasks"]]
    if not pts:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name, ev in pts:
        m = ev["warm"]["policy"]
        ax.scatter(m["task_quality"], m["preference"], s=60, marker="*", label=f"policy {name[:7]}")
    baselines = pts[0][1]["warm"]["baselines"]  # the same agents for every version on one dataset
    for agent, m in baselines.items():
        ax.scatter(m["task_quality"], m["preference"], s=30, marker="o", label=agent)
    ax.set_xlabel("task quality")
    ax.set_ylabel("preference")
    ax.set_title("Warm held-out tasks", fontsize=10)
    ax.legend(fontsize=7)
    return _png(fig)


def grouped_bars(title: str, groups: dict[str, dict[str, float]], ylabel: str) -> bytes | None:
    """Bars of groups[x][series]: one cluster per x, one bar per series (NaN bars left out)."""
    if not groups:
        return None
    series = list(dict.fromkeys(s for g in groups.values() for s in g))
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(groups) * len(series) / 2), 3.2))
    width = 0.8 / len(series)
    x = np.arange(len(groups))
    for j, s in enumerate(series):
        ax.bar(x + j * width, [g.get(s, np.nan) for g in groups.values()], width, label=s)
    ax.set_xticks(x + 0.4 - width / 2, list(groups), fontsize=7, rotation=20)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside: bars reach the top
    return _png(fig)


def intervals(title: str, rows: list[tuple[str, float, float, float]], xlabel: str) -> bytes | None:
    """Point estimates with intervals, one row per (label, estimate, low, high)."""
    if not rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 0.35 * len(rows) + 1.2))
    y = np.arange(len(rows))
    est = np.array([r[1] for r in rows])
    err = np.array([[r[1] - r[2] for r in rows], [r[3] - r[1] for r in rows]])
    ax.errorbar(est, y, xerr=err, fmt="o", capsize=3)
    ax.axvline(0.0, color="grey", lw=0.8)
    ax.set_yticks(y, [r[0] for r in rows], fontsize=7)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_title(title, fontsize=10)
    return _png(fig)
