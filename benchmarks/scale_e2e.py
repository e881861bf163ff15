"""The whole CLI path a new user takes, step by step, at growing sizes: seconds and peak RSS.

Per dataset, in a fresh folder ``WORK/<dataset>/``, each step is the ``parpo`` command a user
runs (``.venv/bin/parpo``, a subprocess: interpreter start and imports count), with the
default presets:

1. ``data``: Amazon Beauty ``parpo data ingest --source amazon-s3rec`` (splits included);
   synthetic worlds ``parpo data synth --users N --items M`` (generation, truth and splits:
   what feeds the rest, in place of an ingest);
2. ``reward``: ``parpo reward train`` (preset ``dice``);
3. ``policy``: ``parpo policy train`` (preset ``default``); also ``s_per_update``, the median
   over updates after the first of rollout + update seconds from the run's ``metrics.csv``;
4. ``eval``: ``parpo policy eval`` (its default hash-stable task sample);
5. ``serve``: ``parpo serve`` for ``--serve-seconds`` of simulated traffic
   (``serving.simulate.simulate_traffic`` in rounds of 64 requests, 8 in flight, k = 5, users
   drawn from the dataset, in a separate process so that its cost stays out of the server's
   RSS); clicks from the synthetic world's true interest like ``parpo demo``, and on Amazon
   Beauty (no truth) with P(click) = 0.1 / sqrt(position). The step's seconds run from the
   start of the process to its exit (start-up, traffic, graceful stop);
6. ``served_ingest``: ``parpo data ingest --source parpo-events`` of the served logs;
7. ``ope``: ``parpo eval ope`` of the published policy on them.

Peak RSS is ``ru_maxrss`` of each step's process (and the processes it waited for) from
``os.wait4`` on it. Linux carries the RSS of this (small) parent into it across ``exec``, so
``parent_rss_mb`` is printed as the floor of that figure. ``loadavg`` (1, 5, 15 min) is read
before and after every step: the machine is shared, read ratios, not seconds.

One JSON line per step, one per dataset (``what: dataset``: total seconds and the Amazon
Beauty targets: every step at most 5 min except policy training, the whole path at most
20 min) and, when both synthetic sizes ran, a growth line (each step's seconds at 50k over
10k users; target at most 5.5 for 5x the users; policy training compares seconds per update).
A step that fails prints its return code and the last lines of its stderr, and the steps
after it that need its output are skipped.

    nice -n 10 .venv/bin/python benchmarks/scale_e2e.py --workdir /tmp/se2e --datasets beauty
    nice -n 10 .venv/bin/python benchmarks/scale_e2e.py --workdir /tmp/se2e --datasets synth10k,synth50k
    .venv/bin/python benchmarks/scale_e2e.py --summarise beauty.jsonl synth10k.jsonl synth50k.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARPO = ROOT / ".venv" / "bin" / "parpo"
BEAUTY = ROOT.parent / "shared" / "data" / "amazon-beauty-5core-s3rec" / "Beauty.txt"
STEPS = ("data", "reward", "policy", "eval", "serve", "served_ingest", "ope")
#: Amazon Beauty targets (issue 24): seconds per step (policy training excepted) and in all.
STEP_LIMIT_S = 300.0
PATH_LIMIT_S = 1200.0
#: Growth target: seconds at the larger size over the smaller, for 5x the users.
GROWTH_LIMIT = 5.5
#: Items of the synthetic worlds, fixed so that the growth ratio isolates users.
SYNTH_ITEMS = 10_000


@dataclass
class StepRun:
    """One finished subprocess: wall seconds, peak RSS, return code, the tails of its output."""

    seconds: float
    rss_mb: float
    rc: int
    stdout: str
    stderr_tail: str
    extra: dict = field(default_factory=dict)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_measured(cmd: list[str], log: Path, timeout_s: float, env: dict | None = None) -> StepRun:
    """Run ``cmd`` to its end (killed past ``timeout_s``), stdout and stderr to ``log``.{out,err};
    wall seconds and ``ru_maxrss`` of the process from ``os.wait4``."""
    out, err = log.with_suffix(".out"), log.with_suffix(".err")
    with out.open("wb") as fo, err.open("wb") as fe:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env, cwd=ROOT)
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return StepRun(seconds, usage.ru_maxrss / 1024, proc.returncode, out.read_text(errors="replace"),
                   tail(err.read_text(errors="replace")))  # fmt: skip


def tail(text: str, n: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def seconds_per_update(metrics_csv: Path) -> tuple[float | None, int]:
    """Median rollout + update seconds over the updates after the first (the first warms caches),
    and the number of updates, from a policy run's ``logs/metrics.csv``."""
    import csv
    import statistics

    if not metrics_csv.exists():
        return None, 0
    with metrics_csv.open() as f:
        rows = list(csv.DictReader(f))
    per = [float(r["time/rollout_s"]) + float(r["time/update_s"]) for r in rows]
    rest = per[1:] or per
    return (statistics.median(rest) if rest else None), len(per)


def growth(
    small: dict[str, float | None], large: dict[str, float | None], limit: float = GROWTH_LIMIT
) -> dict:
    """Per step timed at the smaller size: ``large / small`` seconds and whether it is at most
    ``limit``; ``{step: {"ratio": r, "ok": bool}}``. A step that failed at the larger size
    (``None``) is ``{"ratio": None, "ok": False}``; steps not run there, or without a positive
    time at the smaller size, are left out."""
    out: dict[str, dict] = {}
    for step, s in small.items():
        if s is None or s <= 0 or step not in large:
            continue
        big = large[step]
        r = None if big is None else big / s
        out[step] = {"ratio": None if r is None else round(r, 2), "ok": r is not None and r <= limit}
    return out


def path_targets(seconds: dict[str, float | None], step_limit: float = STEP_LIMIT_S,
                 path_limit: float = PATH_LIMIT_S, exempt: tuple[str, ...] = ("policy",)) -> dict:  # fmt: skip
    """The Amazon Beauty targets on ``{step: seconds}`` (``None``: the step failed or was
    skipped, a miss): each step but ``exempt`` at most ``step_limit``, the sum at most
    ``path_limit``; ``missed`` names the steps over or without a time."""
    missed = [k for k, s in seconds.items() if s is None or (k not in exempt and s > step_limit)]
    total = sum(s for s in seconds.values() if s is not None)
    return {
        "total_s": round(total, 1),
        "steps_ok": not missed,
        "missed": missed,
        "path_ok": total <= path_limit and None not in seconds.values(),
    }


def collect(lines: Iterable[dict]) -> tuple[dict[str, dict[str, float | None]], dict[str, float | None]]:
    """This benchmark's step lines -> ``{dataset: {step: seconds}}`` (``None``: failed or
    skipped) and ``{dataset: policy seconds per update}``. A later line of the same dataset and
    step replaces an earlier one (a re-run of that step)."""
    seconds: dict[str, dict[str, float | None]] = {}
    per_update: dict[str, float | None] = {}
    for x in lines:
        if x.get("bench") != "scale_e2e" or "step" not in x:
            continue
        ok = x.get("rc") == 0
        seconds.setdefault(x["data"], {})[x["step"]] = x["seconds"] if ok else None
        if x["step"] == "policy":
            per_update[x["data"]] = x.get("s_per_update") if ok else None
    return seconds, per_update


def summary_lines(
    seconds: dict[str, dict[str, float | None]], per_update: dict[str, float | None]
) -> list[dict]:
    """One ``dataset`` line per dataset (total seconds; Amazon Beauty: its targets) and, with two
    or more synthetic sizes, a ``growth`` line from the smallest to the largest."""
    out = []
    for name, secs in seconds.items():
        t = path_targets(secs)
        out.append({"bench": "scale_e2e", "what": "dataset", "data": name,
                    **(t if name == "beauty" else {"total_s": t["total_s"]})})  # fmt: skip
    sizes = sorted((synth_users(n), n) for n in seconds if synth_users(n))
    if len(sizes) >= 2:
        (u0, small), (u1, large) = sizes[0], sizes[-1]
        s0, s1 = per_update.get(small), per_update.get(large)
        out.append({"bench": "scale_e2e", "what": "growth", "small": small, "large": large,
                    "users_ratio": u1 / u0, "steps": growth(seconds[small], seconds[large]),
                    # target: no growth with users (reported, not judged: the load moves it)
                    "policy_s_per_update": [s0, s1],
                    "policy_s_per_update_ratio": round(s1 / s0, 2) if s0 and s1 else None})  # fmt: skip
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, timeout_s: float) -> bool:
    import urllib.request

    end = time.monotonic() + timeout_s
    while time.monotonic() < end and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def serve_step(reg: Path, data: Path, events: Path, log: Path, seconds: float, timeout_s: float) -> StepRun:
    """``parpo serve`` on a free port, simulated traffic for ``seconds`` from a separate
    process, then SIGTERM (the graceful stop). Wall seconds from start to exit."""
    port = free_port()
    out, err = log.with_suffix(".out"), log.with_suffix(".err")
    cmd = [str(PARPO), "serve", "-r", str(reg), "--events", str(events), "--port", str(port)]
    with out.open("wb") as fo, err.open("wb") as fe:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, cwd=ROOT)
        ready = wait_ready(port, proc, timeout_s)
        ready_s = time.perf_counter() - t0
        traffic: dict = {}
        if ready:
            sim = subprocess.run(
                [sys.executable, __file__, "--traffic", f"http://127.0.0.1:{port}", str(data), str(seconds)],
                capture_output=True, text=True, timeout=seconds + timeout_s, cwd=ROOT,
            )  # fmt: skip
            lines = sim.stdout.strip().splitlines()
            traffic = json.loads(lines[-1]) if sim.returncode == 0 and lines else {"error": tail(sim.stderr)}
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        timer = threading.Timer(60, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        total = time.perf_counter() - t0
        timer.cancel()
    # uvicorn re-raises the SIGTERM it handled once it has stopped gracefully
    rc = os.waitstatus_to_exitcode(status)
    rc = 0 if rc == -signal.SIGTERM else rc
    if ready and "error" in traffic:
        rc = rc or 1
    extra = {"ready_s": round(ready_s, 1), **traffic}
    return StepRun(total, usage.ru_maxrss / 1024, rc if ready else (rc or 1), "",
                   tail(err.read_text(errors="replace")), extra)  # fmt: skip


def traffic_main(base_url: str, data: Path, seconds: float) -> None:
    """Simulated shoppers against ``base_url`` for ``seconds``; prints one JSON summary line."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from data_pipelines.dataset import Dataset
    from serving.simulate import interest_clicks, simulate_traffic

    users = Dataset(data).interactions().select("user_id").drop_nulls().unique().sort("user_id").collect()
    users = users.to_series().to_list()
    if (data / "truth").exists():
        from data_pipelines.synth import Truth

        clicks, model = interest_clicks(Truth(data).interest), "truth"
    else:

        def clicks(u, i, positions):  # the ClickModel signature: (users, items, positions)
            return 0.1 / np.sqrt(positions)

        model = "0.1/sqrt(position)"
    rng = np.random.default_rng(0)
    end = time.monotonic() + seconds
    t0, rounds, requests, impressions, n_clicks = time.perf_counter(), 0, 0, 0, 0
    while time.monotonic() < end:
        picks = [str(u) for u in rng.choice(users, size=64)]
        t = simulate_traffic(base_url, picks, clicks, k=5, seed=rng, request_prefix=f"r{rounds}")
        rounds, requests = rounds + 1, requests + len(picks)
        impressions, n_clicks = impressions + t.impressions, n_clicks + t.clicks
    wall = time.perf_counter() - t0
    print(json.dumps({"requests": requests, "rps": round(requests / wall, 1), "impressions": impressions,
                      "clicks": n_clicks, "click_model": model}))  # fmt: skip


def synth_users(name: str) -> int | None:
    """``synth10k`` -> 10000; ``beauty`` -> None."""
    m = re.fullmatch(r"synth(\d+)k", name)
    return int(m.group(1)) * 1000 if m else None


def step_commands(name: str, work: Path, version: str | None) -> dict[str, list[str]]:
    """The ``parpo`` command of every step but ``serve`` for dataset ``name`` in ``work``."""
    data, reg = work / "data", work / "registry"
    users = synth_users(name)
    if users is None:
        make = ["data", "ingest", "--source", "amazon-s3rec", "--input", str(BEAUTY), "--out", str(data)]
    else:
        make = ["data", "synth", "--out", str(data), "--users", str(users), "--items", str(SYNTH_ITEMS)]
    cmds = {
        "data": make,
        "reward": ["reward", "train", "-d", str(data), "-r", str(reg), "-o", str(work / "reward-run"),
                   "train.progress_bar=false"],
        "policy": ["policy", "train", "-d", str(data), "-r", str(reg), "-o", str(work / "policy-run"),
                   "train.progress_bar=false"],
        "eval": ["policy", "eval", "-r", str(reg), "-d", str(data)],
        "served_ingest": ["data", "ingest", "--source", "parpo-events", "--input", str(work / "events"),
                          "--out", str(work / "served")],
        "ope": ["eval", "ope", "-l", str(work / "served"), "-p", version or "production", "-r", str(reg)],
    }  # fmt: skip
    return {k: [str(PARPO), *v] for k, v in cmds.items()}


def published(stdout: str) -> str | None:
    """The version a ``parpo ... train`` printed as ``published <label>``."""
    m = re.search(r"^published (\S+)", stdout, re.M)
    return m.group(1) if m else None


def run_dataset(name: str, work: Path, steps: list[str], serve_s: float, timeout_s: float,
                overrides: dict[str, list[str]]) -> tuple[dict[str, float | None], float | None]:  # fmt: skip
    """Run ``steps`` on dataset ``name`` (``overrides``: extra arguments per step); prints one
    JSON line per step; ``{step: seconds}`` (``None`` where the step failed or was skipped), and
    policy training's seconds per update."""
    work.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float | None] = {}
    spu: float | None = None
    version: str | None = None
    failed = False
    for step in steps:
        base = {"bench": "scale_e2e", "data": name, "step": step}
        if failed:
            print(json.dumps({**base, "skipped": "an earlier step failed"}), flush=True)
            seconds[step] = None
            continue
        load0 = loadavg()
        if step == "serve":
            res = serve_step(
                work / "registry", work / "data", work / "events", work / step, serve_s, timeout_s
            )
        else:
            cmd = step_commands(name, work, version)[step] + overrides.get(step, [])
            res = run_measured(cmd, work / step, timeout_s)
        line = {**base, "seconds": round(res.seconds, 1), "peak_rss_mb": round(res.rss_mb), "rc": res.rc,
                **res.extra, "loadavg_before": load0, "loadavg_after": loadavg()}  # fmt: skip
        if step == "policy":
            version = published(res.stdout)
            spu, n = seconds_per_update(work / "policy-run" / "logs" / "metrics.csv")
            line |= {"updates": n, "s_per_update": spu and round(spu, 2), "version": version}
        if overrides.get(step):
            line["overrides"] = overrides[step]
        if res.rc != 0:
            line["stderr_tail"] = res.stderr_tail
            failed = step in ("data", "reward", "policy", "serve", "served_ingest")
            seconds[step] = None
        else:
            seconds[step] = res.seconds
        print(json.dumps(line), flush=True)
    return seconds, spu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, help="one fresh subfolder per dataset (required)")
    ap.add_argument(
        "--datasets", default="beauty,synth10k,synth50k", help="beauty, synthNk (N thousand users)"
    )
    ap.add_argument("--steps", default=",".join(STEPS),
                    help=f"of {','.join(STEPS)}; without data: continue in the dataset's existing folder")  # fmt: skip
    ap.add_argument("--serve-seconds", type=float, default=60.0)
    ap.add_argument("--step-timeout", type=float, default=3600.0, help="kill a step past this many seconds")
    ap.add_argument("--reward-overrides", default="", help="space-separated, e.g. 'stage1.enabled=false'")
    ap.add_argument("--policy-overrides", default="", help="space-separated, e.g. 'train.updates=2'")
    ap.add_argument("--summarise", nargs="+", type=Path, metavar="JSONL",
                    help="print the dataset and growth lines of earlier runs' output (nothing is run)")  # fmt: skip
    ap.add_argument("--traffic", nargs=3, metavar=("URL", "DATA", "SECONDS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.traffic:
        traffic_main(args.traffic[0], Path(args.traffic[1]), float(args.traffic[2]))
        return
    if args.summarise:
        lines = [json.loads(x) for f in args.summarise for x in f.read_text().splitlines() if x.strip()]
        for line in summary_lines(*collect(lines)):
            print(json.dumps(line), flush=True)
        return
    if args.workdir is None:
        ap.error("give --workdir DIR")
    steps = [s for s in args.steps.split(",") if s]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        ap.error(f"unknown step {unknown[0]!r}; steps are {', '.join(STEPS)}")
    import resource

    start = {"bench": "scale_e2e", "what": "start", "loadavg": loadavg(), "cpus": os.cpu_count(),
             "parent_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}  # fmt: skip
    print(json.dumps(start), flush=True)
    results: dict[str, dict[str, float | None]] = {}
    per_update: dict[str, float | None] = {}
    for name in [d for d in args.datasets.split(",") if d]:
        if name != "beauty" and synth_users(name) is None:
            ap.error(f"unknown dataset {name!r}: beauty or synthNk")
        work = args.workdir / name
        if "data" in steps and work.exists() and any(work.iterdir()):
            ap.error(f"{work} is not empty: give a fresh --workdir (the path starts from nothing)")
        overrides = {"reward": args.reward_overrides.split(), "policy": args.policy_overrides.split()}
        results[name], per_update[name] = run_dataset(
            name, work, steps, args.serve_seconds, args.step_timeout, overrides
        )
    for line in summary_lines(results, per_update):
        print(json.dumps({**line, "loadavg": loadavg()}), flush=True)


if __name__ == "__main__":
    main()
