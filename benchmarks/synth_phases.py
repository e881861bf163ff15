"""Peak RSS of each step of ``data_pipelines.synth.write`` (generation, ingest, truth/, splits),
sampled every 0.1 s in this process: which step sets the peak of ``parpo data synth``.

The steps are found by name in ``data_pipelines.synth.write`` (``generate`` or ``play``,
``_ingest``, ``write_truth`` or ``write_truth_parts``, ``_splits``), so the same script measures
earlier code: run it with the Python environment that imports that code. RSS outside the
steps is reported as ``other``; a step's peak includes what earlier steps left allocated.
``--bucket-mb`` overrides the ingest's ``BUCKET_BYTES`` (its pass-2 bucket). Prints one JSON line.

    python benchmarks/synth_phases.py /tmp/syn-ph --users 60000 --items 16000
    /work/main/.venv/bin/python benchmarks/synth_phases.py /tmp/syn-ph0 ...   # main's code (editable install)
"""

from __future__ import annotations

import argparse
import importlib
import json
import threading
import time
from pathlib import Path

STEPS = ("generate", "play", "_ingest", "write_truth", "write_truth_parts", "_splits")


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--items", type=int, default=6000)
    ap.add_argument("--bucket-mb", type=int, default=None)
    a = ap.parse_args()
    import data_pipelines.ingest as ingest
    from data_pipelines.synth import SynthConfig, write

    if a.bucket_mb:
        ingest.BUCKET_BYTES = a.bucket_mb << 20
    mod = importlib.import_module("data_pipelines.synth.write")
    phase, peaks, done = ["other"], {}, threading.Event()

    def sample() -> None:
        while not done.is_set():
            peaks[phase[0]] = max(peaks.get(phase[0], 0), rss_bytes())
            time.sleep(0.1)

    def tracked(name, f):
        def run(*args, **kwargs):
            outer, phase[0] = phase[0], name
            try:
                return f(*args, **kwargs)
            finally:
                phase[0] = outer

        return run

    for name in STEPS:
        if hasattr(mod, name):
            setattr(mod, name, tracked(name, getattr(mod, name)))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    write(SynthConfig(seed=0, n_users=a.users, n_items=a.items), a.out, splits=True)
    seconds = time.perf_counter() - started
    done.set()
    sampler.join()
    print(
        json.dumps(
            {
                "code": str(Path(mod.__file__).resolve().parents[2]),
                "users": a.users,
                "items": a.items,
                "bucket_mb": a.bucket_mb,
                "seconds": round(seconds, 1),
                "peak_gib_by_step": {k: round(v / 2**30, 2) for k, v in peaks.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
