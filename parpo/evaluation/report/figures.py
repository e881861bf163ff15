"""The report's figures as PNG bytes (matplotlib, Agg backend; imported inside each function so
importing the CLI stays light). A function returns None when it has no data to draw."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from parpo.evaluation.report.collect import PolicyData

DPI = 80
#: One marker per series, so agents that coincide stay visible.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")


def constant_value(values: list[float]) -> float | None:
    """The one value every finite entry of ``values`` has, or None when they differ (or none is
    finite): a figure of such data draws a constant, the report says it in a line instead."""
    finite = [v for v in values if v == v]
    return finite[0] if finite and max(finite) - min(finite) < 1e-9 else None


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


#: Training diagnostics drawn beside the rewards (columns of logs/metrics.csv, where logged).
DIAGNOSTICS = ("actor/pg/approx_kl_old", "actor/kl", "actor/entropy", "actor/pg/clipfrac", "actor/grad_norm",
               "preference/frac_anchored")  # fmt: skip


def _panels(policies: list[PolicyData], comps: list[str], title: str) -> bytes | None:
    """One panel per log column in ``comps``, a line per version against the update."""
    logs = [(p.name, p.log) for p in policies if p.log is not None and p.log.height]
    comps = [c for c in comps if any(c in log.columns for _, log in logs)]
    if not comps:
        return None
    plt = _plt()
    cols = min(3, len(comps))
    rows = -(-len(comps) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.8 * rows), squeeze=False, layout="constrained")
    for ax, comp in zip(axes.flat, comps, strict=False):
        for k, (name, log) in enumerate(logs):
            if comp in log.columns:
                ax.plot(log["update"].to_numpy(), log[comp].to_numpy(), marker=MARKERS[k % len(MARKERS)], ms=3,
                        label=name[:7])  # fmt: skip
        label = comp.removeprefix("reward/").removesuffix("/mean")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("update", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
    for ax in list(axes.flat)[len(comps) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return _png(fig)


def learning_curves(policies: list[PolicyData]) -> bytes | None:
    """Mean reward per component against the update, one panel per component, a line per version."""
    logs = [p.log for p in policies if p.log is not None]
    comps = sorted(
        {c for log in logs for c in log.columns if c.startswith("reward/") and c.endswith("/mean")}
    )
    return _panels(policies, comps, "Mean reward per component during training")


def training_diagnostics(policies: list[PolicyData]) -> bytes | None:
    """KL to the rollout policy, entropy, clip fraction, gradient norm and anchored share per update."""
    return _panels(policies, list(DIAGNOSTICS), "Training diagnostics")


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
    for ax, x in ((a, "anchor mean"), (b, "anchor standard deviation")):
        ax.set_xlabel(x, fontsize=8)
        ax.set_ylabel("users", fontsize=8)
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
    for k, (agent, m) in enumerate(baselines.items()):
        ax.scatter(m["task_quality"], m["preference"], s=30, marker=MARKERS[k % len(MARKERS)], label=agent,
                   facecolors="none" if k % 2 else None)  # fmt: skip
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
