"""Served logs -> ``parpo-events`` ingest -> off-policy estimate of another version, against the
truth of a known click model (the serving propensities, the logged requests and pi_e all real).

The figures in docs/evaluation.md are what these tests print:
``.venv/bin/python -m pytest -s -k truth tests/serving/test_ope_roundtrip.py``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from parpo.evaluation.ope.policy import evaluate_served, slate_samples
from parpo.policy.bundle import PolicyBundle
from serving.acting import Answer, LoadedModel
from serving.schemas import ActRequest

K, N_CANDIDATES, SERVED_SAMPLES = 3, 5, 64


def _click_prob(decile: dict[str, int], items: list[str], positions: np.ndarray) -> np.ndarray:
    """The known truth: more popular items are clicked more, lower positions less."""
    return np.array([0.1 + 0.06 * decile[i] for i in items]) / np.sqrt(positions)


@dataclass
class Served:
    ds: Path
    sampled: list[Answer]  # the evaluable decisions (the others fell back: no slate)
    clicks: int
    decile: dict[str, int]


def _served_logs(reg: Path, version: str, tmp_path: Path, n_requests: int, candidates: bool = True) -> Served:
    """``version`` serves ``n_requests`` sampled requests (of ``K`` items from five candidates,
    or from the whole catalogue); clicks follow ``_click_prob``; the decision and event logs are
    ingested with ``--source parpo-events``."""
    from data_pipelines.adapters import open_source
    from data_pipelines.ingest import ingest

    logger = LoadedModel.load(str(reg), version, seed=0)
    users = sorted(logger.bundle.reward_model.user_index)[:60]
    items = logger.bundle.catalogue.item_ids
    # Five candidates per request keep every item's marginal well above 1/N (N = 64 served
    # samples): the served propensity's inverse is then unbiased (docs/evaluation.md).
    pick = np.random.default_rng(1).choice(len(items), size=(n_requests, N_CANDIDATES))
    reqs = [
        ActRequest(request_id=f"q{i}", user_id=users[i % len(users)], k=K, explore=1.0,
                   candidates=[items[j] for j in pick[i]] if candidates else None)
        for i in range(n_requests)
    ]  # fmt: skip
    answers = [a for s in range(0, n_requests, 60) for a in logger.act(reqs[s : s + 60], SERVED_SAMPLES, 1.0)]
    rng = np.random.default_rng(0)
    events = []
    for a in answers:
        d = a.decision.to_json()
        if not d["evaluable"]:
            continue
        slate = d["slate"]
        p = _click_prob(
            logger.decile, [s["item_id"] for s in slate], np.array([s["position"] for s in slate])
        )
        for s, clicked in zip(slate, rng.random(len(slate)) < p, strict=True):
            if clicked:
                events.append({"kind": "event", "schema_version": 1, "received": d["ts"] + 1,
                               "request_id": d["request_id"], "position": s["position"], "event": "click"})  # fmt: skip
    decisions = [a.decision.to_json() for a in answers]
    for name, records in (("decisions", decisions), ("events", events)):
        (tmp_path / "ev" / name).mkdir(parents=True)
        text = "".join(json.dumps(r) + "\n" for r in records)
        (tmp_path / "ev" / name / "20261130T000000Z-1-ab-0001.jsonl").write_text(text)
    ingest(open_source("parpo-events", tmp_path / "ev"), tmp_path / "ds")
    sampled = [a for a in answers if a.decision.evaluable]
    return Served(tmp_path / "ds", sampled, len(events), logger.decile)


def _truth(evaluated: PolicyBundle, served: Served) -> float:
    """The evaluated policy's expected clicks per logged slot, from 128 samples per request."""
    logged = [(a.decision.request_id, a.decision.user_id, {"k": K, "candidates": a.decision.candidates})
              for a in served.sampled]  # fmt: skip
    drawn = slate_samples(evaluated, logged, 128, 1.0, seed=123)
    per_slot = []
    for a, per in zip(served.sampled, drawn, strict=True):
        for s in a.decision.slate:
            j = s.position - 1
            shown = [x[j] for x in per if j < len(x)]
            per_slot.append(_click_prob(served.decile, shown, np.full(len(shown), j + 1)).sum() / len(per))
    return float(np.mean(per_slot))


def _report(setting: str, truth: float, res: dict) -> dict[str, dict]:
    est = {r["estimator"]: r for r in res["rows"]}
    cells = ", ".join(f"{k} {v['estimate']:.3f} ± {v['se']:.3f}" for k, v in est.items())
    print(f"\n{setting}: {res['n_rows']} slots, truth {truth:.3f}; {cells}; "
          f"weight_mean {res['overlap']['weight_mean']:.2f}")  # fmt: skip
    return est


@pytest.mark.integration
def test_served_logs_estimate_another_version_near_its_truth(serve_registry, tmp_path):
    reg, (v1, v2) = serve_registry
    served = _served_logs(reg, v1, tmp_path, n_requests=240)
    assert len(served.sampled) > 0.8 * 240  # fallbacks (propensity 1) are left out below

    evaluated = PolicyBundle.load(reg, v2)
    res = evaluate_served(served.ds, evaluated, samples=64, n_boot=300, seed=0)
    n_slots = sum(len(a.decision.slate) for a in served.sampled)
    assert res["logging_policies"] == [v1]
    assert (res["n_requests"], res["n_rows"]) == (len(served.sampled), n_slots)
    truth = _truth(evaluated, served)
    est = _report("5 candidates per request", truth, res)
    assert set(est) == {"ips", "snips", "dm", "dr", "switch_dr", "dr_os"}  # not uniform: no replay
    for name in ("ips", "snips", "dr"):
        assert abs(est[name]["estimate"] - truth) < 3 * est[name]["se"], (name, est[name], truth)
    assert res["logged"]["estimate"] == pytest.approx(served.clicks / n_slots)
    assert res["overlap"]["propensity_floor_share"] == 0.0
    assert res["overlap"]["short_slate_share"] == 0.0
    assert res["overlap"]["weight_mean"] == pytest.approx(1.0, abs=0.1)  # E_b[w] = 1 with full support


@pytest.mark.integration
def test_diffuse_loggers_bias_ips_down_and_the_truth_test_shows_it(serve_registry, tmp_path):
    """The documented failure mode: near-random policies over the whole catalogue give most
    logged (item, position) pairs p < 1/N, so E[1/p̂] = (1 - (1 - p)^N) / p falls short of 1/p."""
    reg, (v1, v2) = serve_registry
    served = _served_logs(reg, v1, tmp_path, n_requests=240, candidates=False)
    evaluated = PolicyBundle.load(reg, v2)
    res = evaluate_served(served.ds, evaluated, samples=64, n_boot=300, seed=0)
    truth = _truth(evaluated, served)
    est = _report("whole catalogue", truth, res)
    assert est["ips"]["estimate"] < truth - 3 * est["ips"]["se"]  # biased down, well outside noise
    assert res["overlap"]["weight_mean"] < 0.7  # and the diagnostic flags it


@pytest.mark.integration
def test_cli_records_the_estimate_where_the_report_reads_it(serve_registry, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from parpo.cli.console import console
    from parpo.cli.main import app
    from parpo.evaluation.report.collect import load_policy

    monkeypatch.setattr(console, "width", 200)  # CliRunner is not a terminal: rich would use 80
    reg, (v1, v2) = serve_registry
    served = _served_logs(reg, v1, tmp_path, n_requests=40)
    args = ["eval", "ope", "--logs", str(served.ds), "--policy", v2, "--registry", str(reg), "--samples", "8"]
    out = CliRunner().invoke(app, [*args, "--n-boot", "50"])
    assert out.exit_code == 0, out.output
    assert "dr_os" in out.output and "recorded:" in out.output
    (res,) = load_policy(reg, v2).ope
    assert {r["estimator"] for r in res["ope"]["rows"]} == {"ips", "snips", "dm", "dr", "switch_dr", "dr_os"}
    assert res["ope"]["samples"] == 8 and res["ope"]["logging_policies"] == [v1]
    bad = CliRunner().invoke(app, [*args, "--logging-policy", "nobody"])
    # A one-line DataError (``parpo.cli.main`` prints it and exits 1; CliRunner hands it back).
    assert bad.exit_code != 0 and "no impressions logged by 'nobody'" in str(bad.exception)


@pytest.mark.integration
def test_the_retrain_gate_pairs_off_policy_estimates_per_logged_request(serve_registry, tiny_synth, tmp_path):
    """``parpo retrain --policy``'s ``ope`` checks: per-request terms whose mean is the estimator's
    own estimate, paired; the same version on both sides differs by exactly 0."""
    from data_pipelines.dataset import Dataset
    from parpo.retrain.gate import Check, GateConfig, OpeCheck
    from parpo.retrain.policy_steps import ope_checks
    from parpo_core.artefacts import Registry

    reg, (v1, v2) = serve_registry
    served = _served_logs(reg, v1, tmp_path, n_requests=60)
    check = OpeCheck(metric="ips", margin=0.0, samples=16)
    gate = GateConfig(reward=[Check(set="new", metric="ndcg@10", margin=0.0)], ope=[check], n_boot=100)
    (r,) = ope_checks(Registry(reg), v1, {"policy": v2}, Dataset(served.ds), gate)
    assert r["kind"] == "ope" and r["loggers"] == [v1] and r["n_users"] == len(served.sampled)
    own = evaluate_served(served.ds, PolicyBundle.load(reg, v2), samples=16, n_boot=100, seed=gate.seed)
    ips = next(row for row in own["rows"] if row["estimator"] == "ips")
    assert r["candidate"] == pytest.approx(ips["estimate"])  # per-request terms, rescaled: same mean
    assert r["diff"] == pytest.approx(r["candidate"] - r["production"])
    (same,) = ope_checks(Registry(reg), v1, {"policy": v1}, Dataset(served.ds), gate)
    assert same["diff"] == same["ci_low"] == same["ci_high"] == 0.0 and same["result"] == "pass"
    # Data without sampled server decisions: the check is skipped and says why.
    (skipped,) = ope_checks(Registry(reg), v1, {"policy": v2}, Dataset(tiny_synth), gate)
    assert skipped["result"] == "skipped" and skipped["why"] == "the data holds no sampled server decisions"
