"""Serving under bounded load on loopback: latency and throughput of ``POST /v1/act`` next to
this stack's floor, measured in the same run.

Three servers, each its own process on 127.0.0.1, one after the other:

- ``floor``: a bare FastAPI endpoint under the same uvicorn returning a constant (what HTTP +
  JSON + asyncio cost here, no model);
- ``ours``: ``parpo serve`` with the default serve config (micro-batching on);
- ``nobatch``: the same with ``batching.max_batch=1`` (nothing else different).

An asyncio httpx client keeps ``c`` requests in flight (c = 1, 8, 32) for ``--duration`` seconds
each; every request has a new request id and a user drawn from the reward model's users. Also
measured in this process: ``forward_ms``, the model time of one request alone
(``LoadedModel.act`` on one request: every plan step and the N-sample propensity estimate).

Keys: per level ``p50_ms``/``p99_ms``/``rps``/``errors``; ``p50_ratio_to_floor_plus_forward``
(ours at c = 1 over floor p50 + forward; target at most 2.0), ``errors_c32`` (target 0),
``mean_batch_size_c32`` (from the server's /metrics), ``batching_gain_c32`` (ours rps over
nobatch rps at c = 32). The client shares the CPUs with the server: read ratios, not seconds.

    .venv/bin/python benchmarks/serve_load.py --workdir /tmp/sl            # builds a tiny registry
    .venv/bin/python benchmarks/serve_load.py --registry REG --duration 60
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
sys.path.insert(0, str(ROOT))

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


def start(cmd: list[str], port: int) -> subprocess.Popen:
    import httpx

    env = os.environ | {"OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
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


def forward_ms(reg: Path, users: list[str], k: int, repeats: int = 30, version: str | None = None) -> float:
    import torch

    from serving.acting import LoadedModel
    from serving.config import ServeConfig
    from serving.schemas import ActRequest

    torch.set_num_threads(1)
    cfg = ServeConfig()
    m = LoadedModel.load(str(reg), version, 0)
    m.warm(cfg.exploration.samples, cfg.exploration.temperature)
    times = []
    for i in range(repeats):
        req = ActRequest(request_id=f"f{i}", user_id=users[i % len(users)], k=k)
        t0 = time.perf_counter()
        m.act([req], cfg.exploration.samples, cfg.exploration.temperature)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--registry", type=Path, help="REG with a production policy (default: build a tiny one)")
    ap.add_argument("--workdir", type=Path, help="where to build the tiny registry and put the logs")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per load level (issue: 60 at c=32)")
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--k", type=int, default=10)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="serve-load-"))
    work.mkdir(parents=True, exist_ok=True)
    reg = args.registry or build_registry(work)
    from parpo.policy.bundle import PolicyBundle

    bundle = PolicyBundle.load(reg)
    users = list(bundle.reward_model.user_index)[:1000]
    levels = [int(x) for x in args.levels.split(",")]
    fwd = forward_ms(reg, users, args.k)
    print(json.dumps({"bench": "serve_load", "what": "forward", "forward_ms": fwd,
                      "policy_version": bundle.version.name}), flush=True)  # fmt: skip

    def serve_cmd(port: int, events: str, *overrides: str) -> list[str]:
        return [sys.executable, "-m", "parpo.cli.main", "serve", "-r", str(reg), "--port", str(port),
                "--events", str(work / events), *overrides]  # fmt: skip

    results: dict[str, dict[int, dict]] = {}
    servers = {
        "floor": lambda p: [sys.executable, "-c", FLOOR_APP, str(p)],
        "ours": lambda p: serve_cmd(p, "events-ours"),
        "nobatch": lambda p: serve_cmd(p, "events-nobatch", "batching.max_batch=1"),
    }
    batch_c32 = None
    for name, cmd in servers.items():
        port = free_port()
        proc = start(cmd(port), port)
        try:
            results[name] = {}
            for c in levels if name != "nobatch" else [max(levels)]:
                before = batch_stats(port) if name != "floor" else (0.0, 0.0)
                res = asyncio.run(load(port, users, c, args.duration, args.k))
                if name != "floor":
                    s, n = batch_stats(port)
                    res["mean_batch_size"] = (s - before[0]) / max(n - before[1], 1)
                    if name == "ours" and c == max(levels):
                        batch_c32 = res["mean_batch_size"]
                results[name][c] = res
                print(
                    json.dumps({"bench": "serve_load", "server": name, "concurrency": c, **res}), flush=True
                )
        finally:
            stop(proc)
    lo, hi = min(levels), max(levels)
    summary = {
        "bench": "serve_load",
        "what": "summary",
        "duration_s": args.duration,
        "forward_ms": fwd,
        "floor_p50_ms_c1": results["floor"][lo]["p50_ms"],
        "ours_p50_ms_c1": results["ours"][lo]["p50_ms"],
        "p50_ratio_to_floor_plus_forward": results["ours"][lo]["p50_ms"]
        / (results["floor"][lo]["p50_ms"] + fwd),
        f"errors_c{hi}": results["ours"][hi]["errors"],
        f"mean_batch_size_c{hi}": batch_c32,
        f"rps_c{hi}": results["ours"][hi]["rps"],
        f"rps_nobatch_c{hi}": results["nobatch"][hi]["rps"],
        f"batching_gain_c{hi}": results["ours"][hi]["rps"] / results["nobatch"][hi]["rps"],
        "loadavg": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
