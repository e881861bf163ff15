"""Serving under bounded load on loopback: latency and throughput of ``POST /v1/act`` next to
this stack's floor, measured in the same run.

Servers, each its own process on 127.0.0.1, one after the other:

- ``floor``: a bare FastAPI endpoint under the same uvicorn returning a constant (what HTTP +
  JSON + asyncio cost here, no model);
- ``ours``: ``parpo serve`` with the default serve config (micro-batching on);
- ``nobatch``: the same with ``batching.max_batch=1`` (nothing else different);
- ``old`` (with ``--baseline-src``): ``parpo serve`` of another source tree (``git archive``
  of the commit to compare with), the same registry and config.

An asyncio httpx client keeps ``c`` requests in flight (c = 1, 8, 32) for ``--duration`` seconds
each; every request has a new request id and a user drawn from the reward model's users. Also
measured, each source tree in its own process: ``forward_ms``, the model time of one sampled
request alone (``LoadedModel.act``: every plan step and the N-sample propensity estimate),
``greedy_ms`` (one greedy episode), ``batch32_ms_per_request`` (a micro-batch of 32 requests);
and for ours the cost split of one request and of a batch of 32 (plan sampling: featurize,
forward, head draws; env steps; slate sampling; answer: propensities, reward-model scores,
records; logging: the decision record's JSON line; response: its validation and JSON) and
the distinct plans per request.

Keys: per level ``p50_ms``/``p99_ms``/``rps``/``errors``; the issue's targets in the summary:
``forward_ratio_to_greedy`` (at most 3), ``rps_ratio_to_floor_c32`` (at least
min(0.4, 150 / floor rps)), ``p99_ratio_to_floor_c32`` (at most 2), ``errors_c32`` (0),
``p50_ratio_to_floor_plus_forward`` (ours at c = 1 over floor p50 + forward; at most 2); and
``mean_batch_size_c32`` (from the server's /metrics), ``batching_gain_c32`` (ours rps over
nobatch rps). The client shares the CPUs with the server: read ratios, not seconds.

    .venv/bin/python benchmarks/serve_load.py --workdir /tmp/sl            # builds a tiny registry
    .venv/bin/python benchmarks/serve_load.py --registry REG --duration 60
    mkdir /tmp/old && git archive BASE | tar -x -C /tmp/old && .venv/bin/python benchmarks/serve_load.py \
        --registry REG --baseline-src /tmp/old
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The source tree measured (``--forward-only`` runs under the baseline's with this set).
SRC = os.environ.get("SERVE_LOAD_SRC", str(ROOT))
sys.path.insert(0, SRC)

FLOOR_APP = """
import sys, uvicorn
from fastapi import FastAPI
app = FastAPI()
@app.post("/v1/act")
async def act(body: dict) -> dict:
    return {"request_id": body.get("request_id"), "slate": []}
@app.get("/readyz")
async def ready() -> dict:
    return {"status": "ready"}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_registry(work: Path) -> Path:
    """A tiny synthetic registry (the tests' sizes): reward model + one policy."""
    from data_pipelines.synth import SynthConfig, write
    from parpo.presets import load
    from parpo.trainer.config import PolicyTrainConfig
    from parpo.trainer.pipeline import train_and_publish
    from reward_models.config import RewardConfig
    from reward_models.pipeline import train_and_publish as train_reward

    data, reg = work / "data", work / "REG"
    write(SynthConfig(n_users=120, n_items=160, seed=3, rounds=8), data)
    rcfg = load(RewardConfig, "reward", "dice", ["runtime.threads=1", "runtime.device=cpu",
                                                 "train.progress_bar=false", "train.epochs=3"])  # fmt: skip
    train_reward(rcfg, data, reg, work / "rrun", label="dice")
    pcfg = load(PolicyTrainConfig, "policy", "default", ["runtime.device=cpu", "runtime.threads=1",
                                                         "train.updates=2", "train.progress_bar=false"])  # fmt: skip
    train_and_publish(pcfg, data, reg, run_dir=work / "prun")
    return reg


def src_env(src: str) -> dict[str, str]:
    """Environment of a subprocess that runs the source tree ``src`` (run it with ``cwd=src``)."""
    return os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": src, "SERVE_LOAD_SRC": src}


def start(cmd: list[str], port: int, src: str = str(ROOT)) -> subprocess.Popen:
    import httpx

    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=src_env(src), cwd=src
    )
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not become ready: {cmd}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()  # SIGTERM: the graceful path
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def load(port: int, users: list[str], c: int, duration: float, k: int) -> dict:
    import httpx

    lat: list[float] = []
    errors = 0
    end = time.perf_counter() + duration
    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=30) as client:

        async def worker(w: int) -> None:
            nonlocal errors
            rng, i = random.Random(w), 0
            while time.perf_counter() < end:
                body = {"request_id": f"w{w}-{i}", "user_id": rng.choice(users), "k": k}
                t0 = time.perf_counter()
                try:
                    r = await client.post("/v1/act", json=body)
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                lat.append(time.perf_counter() - t0)
                errors += not ok
                i += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(c)))
        wall = time.perf_counter() - t0
    lat.sort()
    return {
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "rps": len(lat) / wall,
        "requests": len(lat),
        "errors": errors,
    }


def batch_stats(port: int) -> tuple[float, float]:
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    vals = {}
    for line in text.splitlines():
        if line.startswith(("parpo_batch_size_sum", "parpo_batch_size_count")):
            name, v = line.split()
            vals[name] = float(v)
    return vals.get("parpo_batch_size_sum", 0.0), vals.get("parpo_batch_size_count", 0.0)


def _requests(users: list[str], k: int, start: int, count: int, tag: str) -> list:
    from serving.schemas import ActRequest

    return [ActRequest(request_id=f"{tag}{start + j}", user_id=users[(start + j) % len(users)], k=k)
            for j in range(count)]  # fmt: skip


def _median_ms(m, users: list[str], k: int, n: int, tau: float, batch: int, calls: int, start: int) -> float:
    """Median model time (ms) of ``LoadedModel.act`` on ``batch`` requests, over ``calls`` calls
    (users from ``start`` on: each call sees users the ones before did not)."""
    times = []
    for i in range(calls):
        reqs = _requests(users, k, start + i * batch, batch, f"t{tau}-")
        t0 = time.perf_counter()
        m.act(reqs, n, tau)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def forward_ms(reg: Path, users: list[str], k: int, repeats: int = 30, version: str | None = None) -> float:
    """Median model time (ms) of one sampled request alone (the default serve config)."""
    import torch

    from serving.acting import LoadedModel
    from serving.config import ServeConfig

    torch.set_num_threads(1)
    cfg = ServeConfig()
    m = LoadedModel.load(str(reg), version, 0)
    m.warm(cfg.exploration.samples, cfg.exploration.temperature)
    return _median_ms(m, users, k, cfg.exploration.samples, cfg.exploration.temperature, 1, repeats, 0)


STAGES = {
    # Inside ``encode``: the reward model's vectors and personal tables of users not seen before.
    "user_features": [("parpo.policy.features", "Featurizer", "users"),
                      ("parpo.policy.features", "Featurizer", "personal_tables")],
    "plan_sampling": [("parpo.policy.features", "Featurizer", "encode"), ("parpo.policy.native", "NativeNet", "logits"),
                      ("parpo.policy.plan_tree", None, "head_logprobs"), ("parpo.policy.plan_tree", None, "draw_calls")],
    "env_steps": [("parpo.env.environment", "BatchEnv", "reset"), ("parpo.env.environment", "BatchEnv", "branch"),
                  ("parpo.env.environment", "BatchEnv", "step")],
    "slate_sampling": [("parpo.policy.plan_tree", None, "pointer_scores"),
                       ("parpo.policy.plan_tree", None, "gumbel_slates")],
}  # fmt: skip


def cost_split(m, users: list[str], k: int, n: int, tau: float, batch: int, calls: int, start: int) -> dict:
    """ms per request by stage (``STAGES``, each user new: ``user_features`` is paid once per
    user and then cached; ``answer``: the rest of ``act``: propensities,
    reward-model scores, records; ``logging``: the decision's JSON line; ``response``: its
    validation and JSON), summed over ``calls`` calls of ``batch`` requests."""
    import importlib

    from serving.schemas import ActResponse
    from serving.segments import encode

    spent: dict[str, float] = dict.fromkeys([*STAGES, "answer", "logging", "response"], 0.0)
    saved = []

    def timed(fn, stage):
        def run(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[stage] += time.perf_counter() - t0

        return run

    for stage, names in STAGES.items():
        for module, cls, name in names:
            owner = getattr(importlib.import_module(module), cls) if cls else importlib.import_module(module)
            saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, timed(saved[-1][2], stage))
    total = 0.0
    try:
        for i in range(calls):
            reqs = _requests(users, k, start + i * batch, batch, "split-")
            t0 = time.perf_counter()
            answers = m.act(reqs, n, tau)
            t1 = time.perf_counter()
            for a in answers:
                encode([a.decision.to_json()])
            t2 = time.perf_counter()
            for a in answers:
                ActResponse.model_validate(a.response).model_dump_json()
            t3 = time.perf_counter()
            total += t1 - t0
            spent["logging"] += t2 - t1
            spent["response"] += t3 - t2
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
    spent["plan_sampling"] -= spent["user_features"]  # timed inside ``encode`` too
    spent["answer"] = total - sum(spent[s] for s in STAGES)
    return {f"{s}_ms": 1000 * v / (calls * batch) for s, v in spent.items()}


def plan_stats(m, users: list[str], k: int, n: int, tau: float, count: int) -> dict:
    """Distinct plans (tool-call sequences) among the N draws of ``count`` requests, and the
    plan probability the exact first-slot part leaves unexplored."""
    tasks = [m._task(r) for r in _requests(users, k, 0, count, "plans-")]
    draws = m.bundle.sample_slates(m._agent(tau), tasks, n)
    return {
        "distinct_plans_per_request": statistics.mean(d.distinct_plans for d in draws),
        "distinct_plans_max": max(d.distinct_plans for d in draws),
        "slot1_unexplored_mean": statistics.mean(d.unexplored or 0.0 for d in draws),
    }


def forward_only(reg: Path, users: list[str], k: int) -> dict:
    """Model-side figures of the source tree this process runs (``SERVE_LOAD_SRC``)."""
    import torch

    from serving.acting import LoadedModel
    from serving.config import ServeConfig

    torch.set_num_threads(1)
    cfg = ServeConfig()
    n, tau = cfg.exploration.samples, cfg.exploration.temperature
    m = LoadedModel.load(str(reg), None, 0)
    m.warm(n, tau)
    # Each measure sees users the earlier ones did not (their personal tables are computed).
    out = {
        "greedy_ms": _median_ms(m, users, k, n, 0.0, 1, 30, 0),
        "forward_ms": _median_ms(m, users, k, n, tau, 1, 30, 30),
        "batch32_ms_per_request": _median_ms(m, users, k, n, tau, 32, 5, 60) / 32,
    }
    out["forward_ratio_to_greedy"] = out["forward_ms"] / out["greedy_ms"]
    if hasattr(m.bundle, "sample_slates"):  # the baseline has neither the tree nor its stages
        out |= {f"c1_{key}": v for key, v in cost_split(m, users, k, n, tau, 1, 20, 220).items()}
        out |= {f"b32_{key}": v for key, v in cost_split(m, users, k, n, tau, 32, 3, 240).items()}
        out |= plan_stats(m, users, k, n, tau, 64)
    return out


def forward_in(src: str, reg: Path, k: int) -> dict:
    """``forward_only`` of the source tree ``src``, in a process of its own."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--forward-only",
        "--registry",
        str(reg),
        "--k",
        str(k),
    ]
    out = subprocess.run(cmd, env=src_env(src), cwd=src, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--registry", type=Path, help="REG with a production policy (default: build a tiny one)")
    ap.add_argument("--workdir", type=Path, help="where to build the tiny registry and put the logs")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per load level (issue: 60 at c=32)")
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument(
        "--baseline-src", help="a source tree to compare with (e.g. git archive BASE | tar -x -C DIR)"
    )
    ap.add_argument("--forward-only", action="store_true", help="print this source tree's model-side figures")
    args = ap.parse_args()
    if args.forward_only:
        from parpo.policy.bundle import PolicyBundle

        users = list(PolicyBundle.load(args.registry).reward_model.user_index)[:1000]
        print(json.dumps(forward_only(args.registry, users, args.k)), flush=True)
        return
    work = args.workdir or Path(tempfile.mkdtemp(prefix="serve-load-"))
    work.mkdir(parents=True, exist_ok=True)
    reg = (args.registry or build_registry(work)).resolve()
    from parpo.policy.bundle import PolicyBundle

    bundle = PolicyBundle.load(reg)
    users = list(bundle.reward_model.user_index)[:1000]
    levels = [int(x) for x in args.levels.split(",")]
    load_start = loadavg()
    sources = {
        "ours": str(ROOT),
        **({"old": str(Path(args.baseline_src).resolve())} if args.baseline_src else {}),
    }
    fwd = {}
    for name, src in sources.items():
        fwd[name] = forward_in(src, reg, args.k)
        print(json.dumps({"bench": "serve_load", "what": "forward", "source": name,
                          "policy_version": bundle.version.name, **fwd[name]}), flush=True)  # fmt: skip

    def serve_cmd(port: int, events: str, *overrides: str) -> list[str]:
        return [sys.executable, "-m", "parpo.cli.main", "serve", "-r", str(reg), "--port", str(port),
                "--events", str(work / events), *overrides]  # fmt: skip

    results: dict[str, dict[int, dict]] = {}
    servers = {
        "floor": (lambda p: [sys.executable, "-c", FLOOR_APP, str(p)], str(ROOT)),
        "ours": (lambda p: serve_cmd(p, "events-ours"), str(ROOT)),
        "nobatch": (lambda p: serve_cmd(p, "events-nobatch", "batching.max_batch=1"), str(ROOT)),
        **({"old": (lambda p: serve_cmd(p, "events-old"), sources["old"])} if "old" in sources else {}),
    }
    for name, (cmd, src) in servers.items():
        port = free_port()
        proc = start(cmd(port), port, src)
        try:
            results[name] = {}
            for c in levels if name != "nobatch" else [max(levels)]:
                before = batch_stats(port) if name != "floor" else (0.0, 0.0)
                res = asyncio.run(load(port, users, c, args.duration, args.k))
                if name != "floor":
                    s, n = batch_stats(port)
                    res["mean_batch_size"] = (s - before[0]) / max(n - before[1], 1)
                results[name][c] = res
                print(
                    json.dumps({"bench": "serve_load", "server": name, "concurrency": c, **res}), flush=True
                )
        finally:
            stop(proc)
    print(json.dumps(summary(results, fwd, levels, args.duration, load_start)), flush=True)


def summary(results: dict, fwd: dict, levels: list[int], duration: float, load_start: list[float]) -> dict:
    lo, hi = min(levels), max(levels)
    floor, ours = results["floor"], results["ours"]
    out = {
        "bench": "serve_load",
        "what": "summary",
        "duration_s": duration,
        "forward_ms": fwd["ours"]["forward_ms"],
        "greedy_ms": fwd["ours"]["greedy_ms"],
        "forward_ratio_to_greedy": fwd["ours"]["forward_ratio_to_greedy"],
        "distinct_plans_per_request": fwd["ours"].get("distinct_plans_per_request"),
        "floor_p50_ms_c1": floor[lo]["p50_ms"],
        "ours_p50_ms_c1": ours[lo]["p50_ms"],
        "p50_ratio_to_floor_plus_forward": ours[lo]["p50_ms"]
        / (floor[lo]["p50_ms"] + fwd["ours"]["forward_ms"]),
        f"errors_c{hi}": ours[hi]["errors"],
        f"mean_batch_size_c{hi}": ours[hi].get("mean_batch_size"),
        f"rps_floor_c{hi}": floor[hi]["rps"],
        f"rps_c{hi}": ours[hi]["rps"],
        f"rps_ratio_to_floor_c{hi}": ours[hi]["rps"] / floor[hi]["rps"],
        f"rps_ratio_target_c{hi}": min(0.4, 150 / floor[hi]["rps"]),
        f"p99_ratio_to_floor_c{hi}": ours[hi]["p99_ms"] / floor[hi]["p99_ms"],
        f"rps_nobatch_c{hi}": results["nobatch"][hi]["rps"],
        f"batching_gain_c{hi}": ours[hi]["rps"] / results["nobatch"][hi]["rps"],
    }
    if "old" in results:
        old = results["old"]
        out |= {
            "old_forward_ms": fwd["old"]["forward_ms"],
            "old_forward_ratio_to_greedy": fwd["old"]["forward_ratio_to_greedy"],
            "forward_speedup_vs_old": fwd["old"]["forward_ms"] / fwd["ours"]["forward_ms"],
            f"old_rps_c{hi}": old[hi]["rps"],
            f"old_rps_ratio_to_floor_c{hi}": old[hi]["rps"] / floor[hi]["rps"],
            f"old_p99_ratio_to_floor_c{hi}": old[hi]["p99_ms"] / floor[hi]["p99_ms"],
            f"rps_gain_vs_old_c{hi}": ours[hi]["rps"] / old[hi]["rps"],
        }
    return out | {"loadavg_start": load_start, "loadavg_end": loadavg(), "cpus": os.cpu_count()}


if __name__ == "__main__":
    main()
