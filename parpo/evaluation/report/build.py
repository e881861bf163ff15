"""``parpo eval report``: one self-contained HTML page (figures embedded as base64 PNGs, no
external file or network access) and a markdown summary with the same numbers.

Baselines (random, popularity, fixed plan, greedy reward) are taken from the first selected
version's eval: on one dataset and reward version every version sees the same ones. An OPE
section is shown for evals whose result holds ``ope``, what ``parpo eval ope --policy V``
records from served logs (``parpo.evaluation.ope.policy.evaluate_served``); versions never
evaluated on logs say "no logged feedback".
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from parpo.evaluation.headline import EXPOSURE_NOTE, ORDER, oracle_share
from parpo.evaluation.policy_eval import PARTS
from parpo.evaluation.report import figures
from parpo.evaluation.report.collect import (
    PolicyData,
    agent_bias,
    default_versions,
    head_tail_hits,
    load_policy,
)
from parpo_core.durable import atomic_write_bytes

HTML_NAME, MD_NAME = "report.html", "summary.md"
SHOWN = ORDER
BIAS_SHOWN = ("avg_pop", "avg_pop_norm", "gini", "tail_share", "coverage")


def _short(name: str) -> str:
    return name.split("-", 1)[0]


def _agents(policies: list[PolicyData], part: str) -> dict[str, dict[str, float]]:
    """Per agent label, the metrics of ``part``: each version's policy, then the baselines."""
    evaluated = [p for p in policies if p.eval is not None]
    out = {f"policy {_short(p.name)}": p.eval[part].get("policy", {}) for p in evaluated}  # type: ignore[index]
    if evaluated:
        out.update(evaluated[0].eval[part]["baselines"])  # type: ignore[index]
    return out


def _per_agent(policies: list[PolicyData], fn: Any) -> dict[str, dict[str, float]]:
    """``fn(version)`` per agent: each version's policy, then the first version's baselines."""
    evaluated = [p for p in policies if p.tasks is not None]
    per = [fn(p) for p in evaluated]
    out = {
        f"policy {_short(p.name)}": v["policy"] for p, v in zip(evaluated, per, strict=True) if "policy" in v
    }
    if per:
        out.update({a: v for a, v in per[0].items() if a != "policy"})
    return out


def _table(header: Sequence[str], rows: list[list[str]]) -> tuple[str, str]:
    """(HTML, markdown) of one table."""
    h = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    md = "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
    md += "".join("| " + " | ".join(r) + " |\n" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>", md


def _fmt(x: float | None) -> str:
    return "—" if x is None or x != x else f"{x:.4f}"


class _Doc:
    """HTML and markdown built side by side, section by section."""

    def __init__(self) -> None:
        self.html: list[str] = []
        self.md: list[str] = []
        self.n_figures = 0

    def section(self, title: str, text: str = "") -> None:
        self.html.append(f"<h2>{html.escape(title)}</h2>" + (f"<p>{html.escape(text)}</p>" if text else ""))
        self.md.append(f"\n## {title}\n" + (f"\n{text}\n" if text else ""))

    def table(self, header: Sequence[str], rows: list[list[str]]) -> None:
        h, m = _table(header, rows)
        self.html.append(h)
        self.md.append("\n" + m)

    def note(self, text: str) -> None:
        self.html.append(f"<p><em>{html.escape(text)}</em></p>")
        self.md.append(f"\n_{text}_\n")

    def figure(self, png: bytes | None, alt: str, empty: str) -> None:
        if png is None:
            self.html.append(f"<p><em>{html.escape(empty)}</em></p>")
            self.md.append(f"\n_{empty}_\n")
            return
        self.n_figures += 1
        b64 = base64.b64encode(png).decode()
        self.html.append(f'<figure><img src="data:image/png;base64,{b64}" alt="{html.escape(alt)}"></figure>')


def headline_metric(tasks: pl.DataFrame) -> str:
    """True preference where the truth is known (every task has it), else hit@10."""
    tp = tasks.get_column("true_preference") if "true_preference" in tasks.columns else None
    return "true_preference" if tp is not None and tp.null_count() == 0 and tasks.height else "hit@10"


def headline_rows(tasks: pl.DataFrame, n_boot: int = 1000) -> list[dict[str, Any]]:
    """The policy against every reference agent of one eval's per-task rows, per part: the agent's
    mean, the policy's, their paired difference (policy - agent) with its 95% percentile bootstrap
    interval, and ``verdict``: ``wins`` / ``loses`` when the interval excludes 0, else ``ties``."""
    from parpo.evaluation.compare import paired_differences

    metric = headline_metric(tasks)
    tasks = tasks.select("part", "task_id", "agent", metric)  # the other columns may be null
    policy = tasks.filter(pl.col("agent") == "policy")
    rows = []
    for agent in [a for a in tasks["agent"].unique(maintain_order=True).to_list() if a != "policy"]:
        pd = paired_differences(policy, tasks.filter(pl.col("agent") == agent), n_boot=n_boot)
        for part in PARTS:
            d = pd[part].get(metric)
            if d is None:
                continue
            verdict = "wins" if d["ci_low"] > 0 else "loses" if d["ci_high"] < 0 else "ties"
            rows.append({"part": part, "agent": agent, "metric": metric, **d, "verdict": verdict})
    return rows


def _headline(doc: _Doc, policies: list[PolicyData]) -> None:
    ev = [p for p in policies if p.tasks is not None]
    doc.section(
        "Headline: the policy against every reference agent",
        "Paired over the same held-out tasks (greedy): policy - agent, 95% bootstrap interval. "
        "The metric is true preference where the truth is known, else hit@10.",
    )
    rows, losses = [], []
    for p in ev:
        for r in headline_rows(p.tasks):  # type: ignore[arg-type]
            rows.append([_short(p.name), r["part"], r["agent"], r["metric"], _fmt(r["mean_b"]), _fmt(r["mean_a"]),
                         _fmt(r["diff"]), f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]", r["verdict"]])  # fmt: skip
            # the oracle ranks by the truth itself: an upper bound, not an agent to beat
            if r["verdict"] == "loses" and r["agent"] != "oracle_true":
                losses.append(
                    f"policy {_short(p.name)} loses to {r['agent']} on {r['part']} tasks: {r['metric']} "
                    f"{r['mean_a']:.3f} vs {r['mean_b']:.3f} ({r['diff']:+.3f}, 95% [{r['ci_low']:+.3f}, "
                    f"{r['ci_high']:+.3f}])."
                )
    if not rows:
        doc.note("no eval with per-task results recorded")
        return
    doc.table(
        [
            "version",
            "part",
            "agent",
            "metric",
            "agent mean",
            "policy mean",
            "policy - agent",
            "95%",
            "verdict",
        ],
        rows,
    )
    for line in losses:
        doc.note(line)


#: Reward-model rows: (label, key in metrics.json, key of MostPop's value or None).
REWARD_ROWS = (
    ("interest vs the true interest (Spearman)", "synthetic.interest_spearman", None),
    ("conformity vs the true conformity (Spearman)", "synthetic.conformity_spearman", None),
    ("uniform-exposure NDCG@10, report half (click)", "report_half.ndcg@10", "baselines.mostpop.report_half.ndcg@10"),
    ("uniform-exposure NDCG@10, all users (click)", "synthetic.uniform.ndcg@10", "baselines.mostpop.synthetic.uniform.ndcg@10"),
    ("uniform-exposure NDCG@10, all users (interest)", "synthetic.uniform_interest.ndcg@10", None),
    ("test NDCG@10 (exposure-following split)", "test.ndcg@10", "baselines.mostpop.test.ndcg@10"),
    ("interest vs item popularity (Spearman)", "diagnostics.interest_popularity_spearman", None),
    ("click vs item popularity (Spearman)", "diagnostics.click_popularity_spearman", None),
)  # fmt: skip


def _dig(d: dict[str, Any] | None, dotted: str) -> Any:
    """``d["a"]["b.c"]`` style lookup of ``a.b.c`` (metric names hold dots); None when absent."""
    if d is None:
        return None
    head, _, rest = dotted.partition(".")
    if dotted in d:
        return d[dotted]
    if head in d and isinstance(d[head], dict) and rest:
        return _dig(d[head], rest)
    return None


def _reward(doc: _Doc, policies: list[PolicyData]) -> None:
    """The reward model each policy was trained against: how it ranks, next to MostPop, how much of
    its interest is popularity, and (synthetic data) how close it is to the truth."""
    doc.section(
        "Reward model",
        "The reward version each policy was trained against (its metrics.json): the policy can only "
        "be as personal as this model's interest branch.",
    )
    seen: dict[str, dict[str, Any] | None] = {}
    for p in policies:
        if p.reward_version and p.reward_version not in seen:
            seen[p.reward_version] = p.reward_metrics
    if not seen:
        doc.note("no reward version recorded in the policies' lineage")
        return
    rows = []
    for version, m in seen.items():
        if m is None:
            rows.append([_short(version), "metrics.json missing (version removed?)", "—", "—"])
            continue
        for label, key, base in REWARD_ROWS:
            value = _dig(m, key)
            if value is not None:
                rows.append([_short(version), label, _fmt(value), _fmt(_dig(m, base)) if base else "—"])
    doc.table(["reward version", "metric", "reward model", "MostPop"], rows)
    peers = {name: (label, m) for p in policies for name, label, m in p.reward_peers if name not in seen}
    if peers:
        doc.note("Other reward models on the same data and split (e.g. MF beside DICE):")
        keys = [(label, key) for label, key, _ in REWARD_ROWS if key != "synthetic.conformity_spearman"]
        doc.table(
            ["reward version", "model", *(label for label, _ in keys)],
            [[_short(n), lab, *(_fmt(_dig(m, key)) for _, key in keys)] for n, (lab, m) in peers.items()],
        )


def _sections(doc: _Doc, policies: list[PolicyData]) -> None:
    _headline(doc, policies)
    _reward(doc, policies)
    ev = [p for p in policies if p.eval is not None]
    doc.section(
        "Held-out tasks", "Means over the warm and cold held-out tasks of each version's eval (greedy)."
    )
    rows = []
    for p in ev:
        for part in PARTS:
            sec = p.eval[part]  # type: ignore[index]
            m = sec.get("policy", {})
            share = oracle_share(sec)
            rows.append([_short(p.name), part, str(sec["n_tasks"]), *(_fmt(m.get(k)) for k in SHOWN),
                         "" if share is None else f"{share:.1%}"])  # fmt: skip
    doc.table(["version", "part", "tasks", *SHOWN, "oracle share"], rows)
    if any(r[-1] for r in rows):
        doc.note(
            "oracle share: the policy's share of the true-interest oracle's margin over popularity "
            f"(true preference); {EXPOSURE_NOTE}."
        )
    doc.md.append("\n" + "".join(f"- {_short(p.name)}: `evals/{p.eval_file}`\n" for p in ev))

    doc.section("Learning curves", "Mean reward per component over the training updates (logs/metrics.csv).")
    doc.figure(figures.learning_curves(policies), "learning curves", "no training logs")
    doc.section(
        "Training diagnostics",
        "Approximate KL to the rollout policy, entropy, clip fraction, gradient norm and the share of "
        "rollouts with an active user anchor, per update.",
    )
    doc.figure(figures.training_diagnostics(policies), "training diagnostics", "no diagnostics logged")
    doc.section(
        "Anchor distributions", "Per-user preference anchors at the end of training (anchors.parquet)."
    )
    doc.figure(figures.anchor_distributions(policies), "anchor distributions", "no anchors recorded")
    doc.section("Preference vs task quality", "Warm tasks; stars are policies, markers the reference agents.")
    warm = _agents(policies, "warm")
    flat = figures.constant_value([m.get("task_quality", float("nan")) for m in warm.values()])
    doc.figure(
        figures.preference_vs_quality(policies) if flat is None else None,
        "preference vs task quality",
        "no eval recorded"
        if flat is None
        else f"every agent has task quality {flat:.3f} on warm tasks: preference alone is in the tables",
    )

    doc.section(
        "Cold vs warm users", "Task quality on warm users (seen in training) and cold ones (held out)."
    )
    cw = {a: {part: _agents(policies, part).get(a, {}).get("task_quality", float("nan")) for part in PARTS}
          for a in _agents(policies, "warm")}  # fmt: skip
    flat = figures.constant_value([v for g in cw.values() for v in g.values()])
    doc.figure(
        figures.grouped_bars("Task quality", cw, "task quality") if flat is None else None,
        "cold vs warm",
        "no eval recorded"
        if flat is None
        else f"every agent has task quality {flat:.3f} on warm and cold tasks",
    )
    doc.table(["agent", *(f"{m} {part}" for m in ("task_quality", "hit@10") for part in PARTS)],
              [[a, *(_fmt(_agents(policies, part)[a].get(m)) for m in ("task_quality", "hit@10") for part in PARTS)]
               for a in cw])  # fmt: skip

    bias = _per_agent(policies, agent_bias)
    doc.section("Popularity bias of the served slates",
                "Over every slot of every evaluated task's slate; popularity = train interactions in the "
                "catalogue snapshot; tail = items outside the head holding 80% of them.")  # fmt: skip
    doc.figure(
        figures.grouped_bars(
            "Popularity bias",
            {a: {k: b[k] for k in ("avg_pop_norm", "gini", "tail_share")} for a, b in bias.items()},
            "share",
        ),  # fmt: skip
        "popularity bias",
        "no slates recorded",
    )
    doc.table(["agent", *BIAS_SHOWN, "slots"],
              [[a, *(_fmt(b[k]) for k in BIAS_SHOWN), str(b["n_slots"])] for a, b in bias.items()])  # fmt: skip

    ht = _per_agent(policies, head_tail_hits)
    doc.section("Head vs tail items", "hit@10 on tasks whose held-out item is a head item and a tail item.")
    doc.figure(
        figures.grouped_bars(
            "hit@10 by target popularity",
            {a: {"head": v["head"], "tail": v["tail"]} for a, v in ht.items()},
            "hit@10",
        ),  # fmt: skip
        "head vs tail",
        "no per-task results recorded",
    )
    doc.table(["agent", "hit@10 head", "hit@10 tail", "tasks head", "tasks tail"],
              [[a, _fmt(v["head"]), _fmt(v["tail"]), str(v["n_head"]), str(v["n_tail"])] for a, v in ht.items()])  # fmt: skip

    _comparisons(doc, policies)
    _ope(doc, policies)


def _comparisons(doc: _Doc, policies: list[PolicyData]) -> None:
    doc.section("Paired comparisons", "Mean over shared tasks of a − b, with its 95% bootstrap interval.")
    names = [p.name for p in policies]
    rows, pts = [], []
    for p in policies:
        for comp in p.comparisons:
            for other, parts in comp["against"].items():
                if other not in names or names.index(other) < names.index(p.name):
                    continue  # each pair once, in the order given, and only among the selected
                for part, sec in parts.items():
                    for m in ("task_quality", "preference", "hit@10"):
                        if m in sec:
                            d = sec[m]
                            label = f"{_short(p.name)} − {_short(other)} {part} {m}"
                            rows.append([_short(p.name), _short(other), part, m, str(sec["n_pairs"]),
                                         _fmt(d["diff"]), _fmt(d["ci_low"]), _fmt(d["ci_high"])])  # fmt: skip
                            pts.append((label, d["diff"], d["ci_low"], d["ci_high"]))
    doc.figure(figures.intervals("Paired differences", pts, "a − b"), "paired differences",
               "no comparison recorded (run parpo eval compare)")  # fmt: skip
    if rows:
        doc.table(["a", "b", "part", "metric", "pairs", "a − b", "low", "high"], rows)


def _ope(doc: _Doc, policies: list[PolicyData]) -> None:
    doc.section(
        "Off-policy estimates",
        "Each version acting at the stated exploration, estimated from served logs, next to the logging "
        "policies' own rate (reward per logged slot). A small ESS or a weight mean far below 1 means the "
        "logs barely cover the evaluated policy: read the intervals, not the points.",
    )
    pts, rows, diag = [], [], []
    for p in policies:
        for res in p.ope:
            o, ov = res["ope"], res["ope"]["overlap"]
            label = f"{_short(p.name)} τ={o['temperature']}"
            for r in [*o["rows"], {"estimator": "logged", **o["logged"]}]:
                pts.append((f"{label} {r['estimator']}", r["estimate"], r["ci_low"], r["ci_high"]))
                rows.append(
                    [label, r["estimator"], _fmt(r["estimate"]), _fmt(r["ci_low"]), _fmt(r["ci_high"])]
                )
            floor = ov["propensity_floor_share"]
            diag.append(
                [label, f"{ov['n']:,}", f"{ov['ess']:,.0f}", _fmt(ov["weight_mean"]), _fmt(ov["weight_max"]),
                 "—" if floor is None else f"{floor:.1%}", f"{ov['short_slate_share']:.1%}"]
            )  # fmt: skip
    doc.figure(figures.intervals("OPE estimates (95% intervals)", pts, "estimate"), "ope",
               "no logged feedback: no off-policy estimate is recorded for these versions")  # fmt: skip
    if rows:
        doc.table(["version", "estimator", "estimate", "low", "high"], rows)
    if diag:
        doc.table(
            ["version", "rows", "ESS", "weight mean", "weight max", "propensity at 1/N", "slates < k"], diag
        )


STYLE = (
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;font-size:13px;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}"
    "img{max-width:100%}h2{border-bottom:1px solid #ddd;margin-top:1.6em}"
)


def write_report(
    registry: str | Path, out: str | Path, versions: Sequence[str] | None = None
) -> tuple[Path, Path]:
    """Write ``out/report.html`` and ``out/summary.md`` for ``versions`` (default: every policy
    version with a recorded eval); each file is written atomically. Returns both paths."""
    from parpo_core.errors import UserError

    chosen = list(versions) if versions else default_versions(registry)
    if not chosen:
        raise UserError(f"{registry}: no policy version has a recorded eval; run parpo eval compare first")
    policies = [load_policy(registry, v) for v in chosen]
    doc = _Doc()
    title = "PARPO policy report: " + ", ".join(_short(p.name) for p in policies)
    _sections(doc, policies)
    page = (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>Registry {html.escape(str(registry))}; versions {html.escape(', '.join(p.name for p in policies))}.</p>"
        + "".join(doc.html)
        + "</body></html>\n"
    )
    out = Path(out)
    html_path, md_path = out / HTML_NAME, out / MD_NAME
    atomic_write_bytes(html_path, page.encode())
    md = f"# {title}\n\nVersions: {', '.join(p.name for p in policies)}. Figures: {HTML_NAME}.\n" + "".join(
        doc.md
    )
    atomic_write_bytes(md_path, md.encode())
    return html_path, md_path
