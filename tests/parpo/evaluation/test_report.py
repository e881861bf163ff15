"""``parpo eval report``: the HTML holds every figure with data, the summary's numbers are the
recorded evals', and the popularity-bias figures on a hand example."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from parpo.evaluation.report.collect import slate_bias
from tests.parpo.evaluation.test_compare import two_policies  # noqa: F401

IMG = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
PNG = b"\x89PNG\r\n\x1a\n"


def test_slate_bias_by_hand():
    # popularity a=6 b=3 c=1 d=0 (total 10): the head (80% = 8) is {a, b}
    ids, pop = ["a", "b", "c", "d"], np.array([6, 3, 1, 0])
    out = slate_bias([["a", "b"], ["a", "c"]], ids, pop)
    # slots a b a c: popularity 6 3 6 1 -> 4; counts [2, 1, 1, 0] sorted [0, 1, 1, 2]:
    # Gini = (-3*0 - 1*1 + 1*1 + 3*2) / (4 * 4) = 0.375
    assert out == pytest.approx(
        {
            "avg_pop": 4.0,
            "avg_pop_norm": 4 / 6,
            "gini": 0.375,
            "tail_share": 0.25,
            "coverage": 0.75,
            "n_slots": 4,
        }
    )
    assert slate_bias([[], []], ids, pop)["n_slots"] == 0


def md_table(md: str, section: str) -> list[list[str]]:
    """Rows of the first table after ``## section`` (header and rule dropped)."""
    part = md.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [ln.strip("|").split("|") for ln in part.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in r] for r in rows[2:]]


@pytest.mark.integration
def test_report_holds_every_figure_and_the_evals_numbers(two_policies, tiny_synth, tmp_path):  # noqa: F811
    from parpo.evaluation.compare import compare_policies
    from parpo.evaluation.policy_eval import read_tasks

    reg, (v1, v2) = two_policies
    paths, results = compare_policies(reg, tiny_synth, [v1, v2], n_boot=200)  # no-op if already recorded
    res = subprocess.run([sys.executable, "-m", "parpo.cli.main", "eval", "report", "-r", str(reg),
                          "-o", str(tmp_path / "rep"), "--json"], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout) == {
        "html": str(tmp_path / "rep" / "report.html"),
        "summary": str(tmp_path / "rep" / "summary.md"),
    }
    page = (tmp_path / "rep" / "report.html").read_text()
    md = (tmp_path / "rep" / "summary.md").read_text()
    # learning curves, diagnostics, anchors, preference vs quality, cold/warm, popularity bias,
    # head/tail, paired; a figure whose data is one constant is a line of text instead
    pngs = [base64.b64decode(b) for b in IMG.findall(page)]
    flat = page.count("every agent has task quality")
    assert len(pngs) == 8 - flat and all(p.startswith(PNG) and len(p) > 5000 for p in pngs)
    assert "no logged feedback" in page and "http" not in page.replace("http-equiv", "")
    # The summary's numbers are the evals'.
    evals = {r["policy_version"][:7]: json.loads((reg / "policy" / r["policy_version"] / "evals"
             / r["policy_eval"]).read_text())["result"] for r in results}  # fmt: skip
    head = md_table(md, "Headline: the policy against every reference agent")
    assert {(r[1], r[2]) for r in head} >= {
        (p, a) for p in ("warm", "cold") for a in ("popularity", "oracle_true")
    }
    assert all(r[3] == "true_preference" and r[-1] in ("wins", "ties", "loses") for r in head)
    # the reward model the policies were trained against, its metrics.json beside MostPop's
    rv = json.loads((reg / "policy" / v1 / "lineage.json").read_text())["reward"]
    rm = json.loads(next((reg / "reward").glob(f"{rv}/metrics.json")).read_text())
    rew = {r[1]: r for r in md_table(md, "Reward model")}
    spearman = rew["interest vs the true interest (Spearman)"]
    assert spearman[0] == rv[:7] and float(spearman[2]) == pytest.approx(
        rm["synthetic"]["interest_spearman"], abs=5e-5
    )
    test_row = rew["test NDCG@10 (exposure-following split)"]
    assert [float(test_row[2]), float(test_row[3])] == pytest.approx(
        [rm["test"]["ndcg@10"], rm["baselines"]["mostpop"]["test"]["ndcg@10"]], abs=5e-5
    )
    rows = md_table(md, "Held-out tasks")
    assert len(rows) == 4
    for version, part, n, true_pref, hit, _, tq, pref, share in rows:  # true preference leads
        sec = evals[version][part]
        assert int(n) == sec["n_tasks"]
        assert [float(true_pref), float(tq), float(pref), float(hit)] == pytest.approx(
            [sec["policy"][k] for k in ("true_preference", "task_quality", "preference", "hit@10")], abs=5e-5
        )
        base = sec["baselines"]
        expected = (sec["policy"]["true_preference"] - base["popularity"]["true_preference"]) / (
            base["oracle_true"]["true_preference"] - base["popularity"]["true_preference"])  # fmt: skip
        assert float(share.rstrip("%")) == pytest.approx(100 * expected, abs=0.05)
    assert "share of the true-interest oracle's margin over popularity" in md
    (comp,) = [r for r in md_table(md, "Paired comparisons") if r[2:4] == ["warm", "task_quality"]]
    d = results[0]["against"][v2]["warm"]["task_quality"]
    assert [float(x) for x in comp[5:8]] == pytest.approx([d["diff"], d["ci_low"], d["ci_high"]], abs=5e-5)
    # Popularity bias: the policy's average slot popularity, recomputed from the per-task parquet.
    tasks = read_tasks(paths[0].parent / results[0]["policy_eval"]).filter(pl.col("agent") == "policy")
    cat = pl.read_parquet(reg / "policy" / v1 / "catalogue.parquet")
    slots = tasks.select(pl.col("slate").explode().alias("item_id")).drop_nulls().join(cat, on="item_id")
    (bias,) = [r for r in md_table(md, "Popularity bias of the served slates") if r[0] == f"policy {v1[:7]}"]
    assert (
        float(bias[1]) == pytest.approx(slots["popularity"].mean(), abs=5e-5)
        and int(bias[-1]) == slots.height
    )


@pytest.mark.integration
def test_report_shows_recorded_ope_estimates(two_policies, tmp_path):  # noqa: F811
    from parpo.evaluation.report import write_report
    from parpo_core.artefacts import Registry

    reg = tmp_path / "REG"
    shutil.copytree(two_policies[0], reg)
    v1 = two_policies[1][0]
    rows = [{"estimator": "ips", "estimate": 0.012, "ci_low": 0.008, "ci_high": 0.016},
            {"estimator": "dr", "estimate": 0.011, "ci_low": 0.009, "ci_high": 0.013}]  # fmt: skip
    ope = {  # the shape parpo.evaluation.ope.policy.evaluate_served records
        "temperature": 0.0, "rows": rows, "logged": {"estimate": 0.010, "ci_low": 0.009, "ci_high": 0.011},
        "overlap": {"n": 900, "ess": 120.0, "weight_mean": 0.98, "weight_max": 12.0,
                    "propensity_floor_share": 0.05, "short_slate_share": 0.02},
    }  # fmt: skip
    Registry(reg).add_eval("policy", v1, "abc123", "ope", {"ope": "test"}, {"ope": ope})
    html, md = write_report(reg, tmp_path / "rep", [v1])
    page, summary = html.read_text(), md.read_text()
    assert "no logged feedback" not in page
    label = f"{v1[:7]} τ=0.0"
    table = md_table(summary, "Off-policy estimates")
    assert table[:3] == [
        [label, "ips", "0.0120", "0.0080", "0.0160"],
        [label, "dr", "0.0110", "0.0090", "0.0130"],
        [label, "logged", "0.0100", "0.0090", "0.0110"],
    ]
    assert table[-1] == [label, "900", "120", "0.9800", "12.0000", "5.0%", "2.0%"]  # the overlap diagnostics


def _tasks(values: dict[str, list[float]], truth: bool = True) -> pl.DataFrame:
    """Per-task rows of agents on the warm part (task ids 0..n-1), metrics from ``values``."""
    frames = []
    for agent, v in values.items():
        n = len(v)
        frames.append(
            pl.DataFrame(
                {
                    "part": ["warm"] * n,
                    "task_id": [str(i) for i in range(n)],
                    "agent": [agent] * n,
                    "hit@10": [float(x > 0.5) for x in v],
                    "true_preference": v if truth else [None] * n,
                },
                schema_overrides={"true_preference": pl.Float64},
            )
        )
    return pl.concat(frames)


def test_headline_rows_pair_the_policy_with_each_agent_and_name_the_verdict():
    from parpo.evaluation.report.build import headline_metric, headline_rows

    rng = np.random.default_rng(0)
    base = rng.normal(0.0, 1.0, 400)
    tasks = _tasks({"policy": base + 0.5, "popularity": base, "oracle_true": base + 1.0, "twin": base + 0.5})
    rows = {r["agent"]: r for r in headline_rows(tasks, n_boot=200)}
    assert set(rows) == {"popularity", "oracle_true", "twin"} and headline_metric(tasks) == "true_preference"
    assert rows["popularity"]["diff"] == pytest.approx(0.5) and rows["popularity"]["verdict"] == "wins"
    assert rows["oracle_true"]["diff"] == pytest.approx(-0.5) and rows["oracle_true"]["verdict"] == "loses"
    assert rows["twin"]["diff"] == pytest.approx(0.0) and rows["twin"]["verdict"] == "ties"
    assert rows["popularity"]["mean_b"] == pytest.approx(base.mean())
    # without the truth the headline is hit@10
    no_truth = _tasks({"policy": base + 0.5, "popularity": base}, truth=False)
    (r,) = headline_rows(no_truth, n_boot=200)
    assert r["metric"] == "hit@10" and r["diff"] == pytest.approx(
        ((base + 0.5) > 0.5).mean() - (base > 0.5).mean()
    )


def test_constant_value_names_the_one_value_a_figure_would_draw():
    from parpo.evaluation.report.figures import constant_value

    assert constant_value([1.0, 1.0, float("nan"), 1.0]) == 1.0
    assert constant_value([1.0, 0.99]) is None
    assert constant_value([float("nan")]) is None and constant_value([]) is None


def test_reward_peers_are_the_other_models_on_the_same_data_and_split(tmp_path):
    from parpo.evaluation.report.collect import model_label, reward_peers
    from parpo_core.artefacts import Registry
    from tests.plugins.artefacts import lineage, publish

    reg = Registry(tmp_path / "REG")
    dice = publish(reg, tag="d", config={"model": {"disentangle": True}}).name
    mf = publish(reg, tag="m", config={"model": {"disentangle": False}}).name
    publish(
        reg, tag="o", config={"model": {"disentangle": False}}, lineage=lineage(data_fingerprint="0" * 64)
    )
    gcn = publish(reg, tag="g", config={"model": {"disentangle": False, "backbone": "lightgcn"}}).name
    peers = reward_peers(reg, dice)
    assert [(n, label) for n, label, _ in peers] == [(mf, "mf"), (gcn, "mf (lightgcn)")]  # not other data
    assert peers[0][2]["test"]["ndcg@10"] == 0.5
    assert model_label({}) == "dice" and reward_peers(reg, "v999999") == []
