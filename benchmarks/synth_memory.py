"""Peak memory of generating a synthetic world (issue 16's scale runs): in memory (this code's
``generate``: the per-round frames concatenated into the whole log, as the old ``write`` held it;
not the old code itself; then the files the old ``write`` staged from them: rows,
uniform test and truth impressions as parquet, and the observed interest pairs) next to
streamed (``play`` into ``write``'s staging sink: the same files, appended as each round
ends), on the same config, in the same run.

Each contender runs in its own subprocess (``peak_rss_gb`` is its ``VmHWM``), the two
alternating per size. The ingest, truth/ and splits that ``write`` runs afterwards are not
included (``/usr/bin/time -v parpo data synth`` measures the whole command; benchmarks/README.md).
Prints one JSON line per (size, contender) and one with the ratios (streamed / in memory).

    python benchmarks/synth_memory.py --size 20000x6000x10 --size 20000x6000x30
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = ("in_memory", "streamed")


def peak_rss_gb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def one(contender: str, users: int, items: int, rounds: int) -> dict[str, object]:
    """Generate the world once with ``contender`` in this process; rows, seconds, peak RSS."""
    from data_pipelines.synth import SynthConfig, generate
    from data_pipelines.synth.generate import play, streams
    from data_pipelines.synth.truth import all_pairs, observed_pairs
    from data_pipelines.synth.world import build_world
    from data_pipelines.synth.write import Staging

    cfg = SynthConfig(seed=0, n_users=users, n_items=items, rounds=rounds)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="synth-memory-") as tmp:
        if contender == "in_memory":  # the files the old write staged, from the whole frames
            data = generate(cfg)
            for name, df in (("interactions", data.interactions), ("uniform_test", data.uniform)):
                df.write_parquet(Path(tmp) / f"{name}.parquet")
            data.impressions.write_parquet(Path(tmp) / "impressions.parquet", compression="zstd")
            pairs = None if all_pairs(data.world) else observed_pairs(data.world, data.impressions)
            rows = data.interactions.height
        else:
            st = streams(cfg.seed)
            world = build_world(cfg, st.users, st.items)
            sink = Staging(Path(tmp), world)
            play(cfg, world, st, sink)
            sink.close()
            pairs, rows = sink.observed_pairs(), sink.rows["main"].rows
    seconds = time.perf_counter() - started
    return {
        "users": users,
        "items": items,
        "rounds": rounds,
        "contender": contender,
        "rows": rows,
        "observed_pairs": None if pairs is None else int(pairs.size),
        "seconds": round(seconds, 1),
        "peak_rss_gb": round(peak_rss_gb(), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", action="append", help="USERSxITEMSxROUNDS (repeatable)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        contender, *nums = a.child
        print(json.dumps(one(contender, *map(int, nums))))
        return
    for size in a.size or ["20000x6000x10"]:
        users, items, rounds = size.split("x")
        got = {}
        for contender in CONTENDERS:
            cmd = [sys.executable, __file__, "--child", contender, users, items, rounds]
            out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
            got[contender] = json.loads(out.strip().splitlines()[-1])
            print(json.dumps(got[contender]), flush=True)
        ratio = {k: round(got["streamed"][k] / got["in_memory"][k], 2) for k in ("seconds", "peak_rss_gb")}
        print(json.dumps({"size": size, "rows": got["streamed"]["rows"], "streamed_over_in_memory": ratio}))


if __name__ == "__main__":
    main()
