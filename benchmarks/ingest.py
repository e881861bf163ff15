"""Ingest benchmark: our ingest vs the polars floor vs a vectorised pandas reference.

Contenders, each in its own subprocess (so peak RSS is per process):

- ``ours``: ``data_pipelines.ingest.ingest`` (streamed chunks, validation,
  quarantine, exact dedupe, ``seq``, id maps, zstd parquet, transactional publish).
- ``floor``: polars reads the same CSV (every column as a string, no
  validation) and writes the same columns to parquet with zstd.
- ``pandas``: ``benchmarks/ingest_pandas.py``, the same validation, dedupe,
  ``seq`` and id maps written idiomatically with vectorised pandas.

Datasets: ``taobao-2h`` (the real 110k-row Taobao slice, read in place) and
``synthetic`` (a canonical CSV of ``--rows`` lines generated in a temp folder
before the timed part: Zipf item popularity, an event funnel, quoted fields,
~0.5% exact duplicate lines and ~0.1% corrupt lines of 13 kinds).

Prints one JSON object per dataset and size::

    python benchmarks/ingest.py --datasets taobao-2h synthetic --rows 5000000 --repeats 3

Times are the median over ``--repeats`` runs of the work inside each
subprocess (interpreter start and imports excluded); ``peak_rss_mb`` is the
largest peak RSS (``VmHWM``) of any repeat. After the timed runs the outputs of
``ours`` and ``pandas`` are compared (rows, seq, rejects, id maps); the result
is the ``check`` field.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TAOBAO_2H = Path("/work/shared/data/taobao-userbehavior-sample/time_slice_2h.csv")
TAOBAO_COLUMNS = ["user", "item", "category", "behavior", "ts"]
SYNTH_COLUMNS = [
    "user_id",
    "item_id",
    "ts",
    "event",
    "value",
    "category",
    "session_id",
    "request_id",
    "position",
    "propensity",
]
CONTENDERS = ("ours", "floor", "pandas")


# --------------------------------------------------------------------------- synthetic data

CORRUPT_KINDS = (
    "ragged_short",  # a field missing
    "ragged_long",  # an extra field
    "stray_quote",  # a quote inside an unquoted field
    "empty_line",
    "bad_ts",  # not a timestamp
    "ts_range",  # Unix 0 or the year 2100
    "bad_event",
    "no_item",
    "no_user",  # neither user_id nor request_id
    "propensity",  # 0 or above 1
    "position",  # 0
    "value_nonfinite",  # nan / inf
    "value_text",  # not a number
)


def make_synthetic(path: Path, n_rows: int, seed: int = 0) -> dict:
    """Write a canonical CSV of ``n_rows`` data lines (plus the header) to ``path``.

    An e-commerce log over 30 days, time-ordered: users with log-normal
    activity (``n_rows // 25`` users), ``n_rows // 50`` items with Zipf(1.05)
    popularity, 1% of categories named with a comma (so written quoted), an
    event funnel (view 62%, click 22%, cart 8%, fav 4%, buy 4%), prices on cart
    and buy, slate position and propensity on recommended views and clicks
    (with a request id; 1% of those rows anonymous), ~0.5% exact duplicate lines
    (repeated within the next 1000 lines) and ~0.1% corrupt lines.
    """
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    n_dup = round(n_rows * 0.005)
    n_bad = round(n_rows * 0.001)
    n = n_rows - n_dup
    n_users, n_items = max(1000, n_rows // 25), max(1000, n_rows // 50)
    n_cats = max(20, n_items // 100)

    activity = rng.lognormal(0.0, 1.0, n_users)
    user = rng.choice(n_users, n, p=activity / activity.sum())
    pop = 1.0 / np.arange(1, n_items + 1) ** 1.05
    item = rng.permutation(n_items)[rng.choice(n_items, n, p=pop / pop.sum())]
    t0 = 1_709_251_200  # 2024-03-01T00:00:00Z
    ts = np.sort(t0 + rng.integers(0, 30 * 86_400, n))
    event = rng.choice(np.array(["view", "click", "cart", "fav", "buy"]), n, p=[0.62, 0.22, 0.08, 0.04, 0.04])
    item_cat = rng.integers(0, n_cats, n_items)
    cat_names = np.array([f'"Home, Garden {k}"' if k % 100 == 7 else f"c{k}" for k in range(n_cats)])
    item_price = np.round(rng.lognormal(3.0, 1.0, n_items), 2)
    rec = (event == "view") | (event == "click")
    rec &= rng.random(n) < 0.5
    position = np.minimum(rng.geometric(0.25, n), 20)
    anon = rec & (rng.random(n) < 0.01)

    df = pl.DataFrame(
        {
            "user": user + 1_000_000,
            "item": item + 5_000_000,
            "ts": ts,
            "event": event,
            "rec": rec,
            "anon": anon,
            "price": item_price[item],
            "cat": cat_names[item_cat[item]],
            "pos": position,
            "req": rng.integers(0, 10**12, n),
        }
    )
    s = pl.col
    cols = {
        "user_id": pl.when(s("anon")).then(pl.lit("")).otherwise(s("user").cast(pl.String)),
        "item_id": s("item").cast(pl.String),
        "ts": s("ts").cast(pl.String),
        "event": s("event"),
        "value": pl.when(s("event").is_in(["cart", "buy"]))
        .then(s("price").cast(pl.String))
        .otherwise(pl.lit("")),
        "category": s("cat"),
        "session_id": pl.format("s{}-{}", s("user"), s("ts") // 1800),
        "request_id": pl.when(s("rec")).then(pl.format("r{}", s("req"))).otherwise(pl.lit("")),
        "position": pl.when(s("rec")).then(s("pos").cast(pl.String)).otherwise(pl.lit("")),
        "propensity": pl.when(s("rec"))
        .then((0.95 / s("pos").cast(pl.Float64) ** 0.7).round(4).cast(pl.String))
        .otherwise(pl.lit("")),
    }
    df = df.select(**cols)

    # Corrupt lines: distinct clean rows, one kind each (round robin).
    bad_idx = rng.choice(n, n_bad, replace=False)
    kind = np.full(n, "", dtype=object)
    kind[bad_idx] = np.array(CORRUPT_KINDS, dtype=object)[np.arange(n_bad) % len(CORRUPT_KINDS)]
    alt = rng.random(n) < 0.5
    df = df.with_columns(kind=pl.Series(kind, dtype=pl.String), alt=pl.Series(alt))
    k, a = s("kind"), s("alt")

    def when(kinds: str, then: pl.Expr, col: str) -> pl.Expr:
        return pl.when(k == kinds).then(then).otherwise(s(col)).alias(col)

    df = df.with_columns(
        pl.when(k == "no_user").then(pl.lit("")).otherwise(s("user_id")).alias("user_id"),
        pl.when(k == "no_user").then(pl.lit("")).otherwise(s("request_id")).alias("request_id"),
        pl.when(k == "stray_quote")
        .then(s("item_id").str.slice(0, 3) + pl.lit('"') + s("item_id").str.slice(3))
        .when(k == "no_item")
        .then(pl.lit(""))
        .otherwise(s("item_id"))
        .alias("item_id"),
        pl.when(k == "bad_ts")
        .then(pl.when(a).then(pl.lit("not-a-time")).otherwise(pl.lit("2024-13-45T25:61:00")))
        .when(k == "ts_range")
        .then(pl.when(a).then(pl.lit("0")).otherwise(pl.lit("4102444800")))
        .otherwise(s("ts"))
        .alias("ts"),
        when("bad_event", pl.lit("purchase"), "event"),
        pl.when(k == "value_nonfinite")
        .then(pl.when(a).then(pl.lit("nan")).otherwise(pl.lit("inf")))
        .when(k == "value_text")
        .then(pl.lit("n/a"))
        .otherwise(s("value"))
        .alias("value"),
        when("propensity", pl.when(a).then(pl.lit("0")).otherwise(pl.lit("1.5")), "propensity"),
        when("position", pl.lit("0"), "position"),
    )
    line = pl.concat_str([s(c) for c in SYNTH_COLUMNS], separator=",")
    line = (
        pl.when(k == "ragged_short")
        .then(line.str.replace(r",[^,]*$", ""))
        .when(k == "ragged_long")
        .then(line + pl.lit(",extra"))
        .when(k == "empty_line")
        .then(pl.lit(""))
        .otherwise(line)
    )
    lines = df.select(
        line.alias("line"), (k == "").alias("clean"), pl.int_range(n).cast(pl.Float64).alias("at")
    )

    # Exact duplicates of clean lines, repeated up to 1000 lines later (retries, double logging).
    clean = np.flatnonzero(lines["clean"].to_numpy())
    src = np.sort(rng.choice(clean, n_dup, replace=False))
    dups = lines[src].with_columns(pl.Series("at", src + rng.uniform(0.5, 1000.0, n_dup)))
    out = pl.concat([lines, dups]).sort("at").select("line")

    with open(path, "wb") as f:
        f.write((",".join(SYNTH_COLUMNS) + "\n").encode())
        out.write_csv(f, include_header=False, quote_style="never")
    return {"rows": out.height, "duplicates": n_dup, "corrupt": n_bad, "bytes": path.stat().st_size}


# --------------------------------------------------------------------------- contenders (child side)


def run_ours(data: str, path: Path, out: Path) -> dict:
    sys.path.insert(0, str(REPO))
    from data_pipelines.adapters import canonical, taobao
    from data_pipelines.ingest import ingest

    t = time.perf_counter()
    src = taobao.source(path) if data == "taobao-2h" else canonical.source(path)
    summary = ingest(src, out)
    dt = time.perf_counter() - t
    return {"seconds": dt, "rows_written": summary["rows_written"], "rows_rejected": summary["rows_rejected"]}


def run_floor(data: str, path: Path, out: Path) -> dict:
    import polars as pl

    t = time.perf_counter()
    if data == "taobao-2h":
        df = pl.read_csv(path, has_header=False, new_columns=TAOBAO_COLUMNS, infer_schema=False)
    else:
        df = pl.read_csv(path, infer_schema=False, quote_char=None, truncate_ragged_lines=True)
    out.mkdir(parents=True, exist_ok=True)
    df.write_parquet(out / "floor.parquet", compression="zstd")
    dt = time.perf_counter() - t
    return {"seconds": dt, "rows_written": df.height}


def run_pandas(data: str, path: Path, out: Path) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(REPO))
    import ingest_pandas

    t = time.perf_counter()
    summary = ingest_pandas.ingest(path, "taobao" if data == "taobao-2h" else "canonical", out)
    dt = time.perf_counter() - t
    return {"seconds": dt, "rows_written": summary["rows_written"], "rows_rejected": summary["rows_rejected"]}


RUNNERS = {"ours": run_ours, "floor": run_floor, "pandas": run_pandas}


def peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` where there is /proc (``ru_maxrss`` survives ``exec``,
    so a child's starts at its parent's RSS at fork time)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(args: argparse.Namespace) -> None:
    if args.generate:
        print(json.dumps(make_synthetic(Path(args.generate), args.rows[0], args.seed)), flush=True)
        return
    result = RUNNERS[args.run_contender](args.data, Path(args.input), Path(args.out))
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result), flush=True)


# --------------------------------------------------------------------------- parent side


def run_contender(name: str, data: str, path: Path, out: Path, timeout: float) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run-contender", name]
    cmd += ["--data", data, "--input", str(path), "--out", str(out)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_outputs(data: str, ours: Path, pandas_out: Path) -> str:
    """Compare what ours and pandas produced; 'ok' or the first difference."""
    import polars as pl

    sys.path.insert(0, str(REPO))
    from data_pipelines.dataset import Dataset

    ds = Dataset(ours)
    sort = [pl.coalesce("user_id", pl.lit("\x00request:") + pl.col("request_id")), "seq"]
    a = ds.interactions().collect().sort(sort)
    b = pl.read_parquet(pandas_out / "interactions.parquet").sort(sort)
    if a.height != b.height:
        return f"interactions: {a.height} rows (ours) vs {b.height} (pandas)"
    if not a.equals(b):
        diff = [c for c in a.columns if not a[c].equals(b[c])]
        return f"interactions differ in columns {diff}"
    ra = (
        pl.read_parquet(ours / ds.manifest["ingests"][-1]["rejects"])
        .select("line", "raw", "reason")
        .sort("line")
    )
    rb = pl.read_parquet(pandas_out / "rejects.parquet").select("line", "raw", "reason").sort("line")
    if not ra.equals(rb):
        j = ra.join(rb, on="line", how="full", suffix="_pandas")
        j = j.filter(
            (pl.col("reason") != pl.col("reason_pandas")).fill_null(True)
            | (pl.col("raw") != pl.col("raw_pandas")).fill_null(True)
        )
        return f"rejects differ ({ra.height} vs {rb.height}); first: {j.head(3).to_dicts()}"
    for kind in ("users", "items"):
        if not ds.idmap(kind).equals(pl.read_parquet(pandas_out / f"idmap_{kind}.parquet")):
            return f"id map {kind} differs"
    items_a = ds.items().select("item_id", "category")
    items_b = pl.read_parquet(pandas_out / "items.parquet").select("item_id", "category")
    if not items_a.equals(items_b):
        return "items table differs"
    return "ok"


def git_sha() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"


def bench(data: str, path: Path, rows: int, args: argparse.Namespace, work: Path) -> dict:
    runs: dict[str, list[dict]] = {c: [] for c in args.contenders}
    errors: dict[str, str] = {}
    for _ in range(args.repeats):
        for c in args.contenders:
            if c in errors:
                continue
            r = run_contender(c, data, path, work / f"out-{c}", args.timeout)
            if "error" in r:
                errors[c] = r["error"]
            else:
                runs[c].append(r)
            print(f"# {data} {rows} {c}: {r}", file=sys.stderr, flush=True)

    def med(c: str) -> float | None:
        return statistics.median(r["seconds"] for r in runs[c]) if runs.get(c) else None

    t = {c: med(c) for c in CONTENDERS}
    result = {
        "bench": "ingest",
        "data": data,
        "rows": rows,
        "ours_s": _r(t["ours"]),
        "floor_s": _r(t["floor"]),
        "pandas_s": _r(t["pandas"]),
        "ratio_to_floor": _r(t["ours"] / t["floor"]) if t["ours"] and t["floor"] else None,
        "speedup_vs_pandas": _r(t["pandas"] / t["ours"]) if t["ours"] and t["pandas"] else None,
        "peak_rss_mb": {
            c: _r(max(r["peak_rss_mb"] for r in runs[c]), 0) if runs.get(c) else None for c in CONTENDERS
        },
        "repeats": args.repeats,
        "runs_s": {c: [_r(r["seconds"]) for r in runs[c]] for c in args.contenders},
        "input_mb": _r(path.stat().st_size / 2**20, 1),
    }
    if runs.get("ours"):
        result["rows_rejected"] = runs["ours"][-1]["rows_rejected"]
    if errors:
        result["errors"] = errors
    if runs.get("ours") and runs.get("pandas") and not args.no_check:
        result["check"] = check_outputs(data, work / "out-ours", work / "out-pandas")
    for c in args.contenders:
        shutil.rmtree(work / f"out-{c}", ignore_errors=True)
    return result


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--datasets", nargs="+", default=["taobao-2h", "synthetic"], choices=["taobao-2h", "synthetic"]
    )
    p.add_argument("--rows", nargs="+", type=int, default=[5_000_000], help="synthetic sizes (data lines)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=CONTENDERS)
    p.add_argument(
        "--workdir", type=Path, help="keep generated CSVs here (reused when present); default: a temp dir"
    )
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per contender run")
    p.add_argument("--no-check", action="store_true", help="skip comparing the outputs of ours and pandas")
    p.add_argument("--seed", type=int, default=0)
    # child mode
    p.add_argument("--run-contender", choices=CONTENDERS, help=argparse.SUPPRESS)
    p.add_argument("--generate", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.run_contender or args.generate:
        child(args)
        return

    work = Path(tempfile.mkdtemp(prefix="parpo-bench-ingest-"))
    data_dir = args.workdir or work
    data_dir.mkdir(parents=True, exist_ok=True)
    print(f"# git {git_sha()}, {os.cpu_count()} cpus, work dir {work}", file=sys.stderr, flush=True)
    try:
        for data in args.datasets:
            if data == "taobao-2h":
                if not TAOBAO_2H.is_file():
                    print(f"# skip taobao-2h: {TAOBAO_2H} not found", file=sys.stderr)
                    continue
                with open(TAOBAO_2H, "rb") as f:
                    rows = sum(1 for _ in f)
                print(json.dumps(bench(data, TAOBAO_2H, rows, args, work)), flush=True)
                continue
            for n in args.rows:
                path = data_dir / f"synthetic-{n}-seed{args.seed}.csv"
                if not path.is_file():  # in a subprocess, so that this process stays small
                    t = time.perf_counter()
                    cmd = [sys.executable, str(Path(__file__).resolve()), "--generate", str(path)]
                    cmd += ["--rows", str(n), "--seed", str(args.seed)]
                    info = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()
                    print(
                        f"# generated {path} in {time.perf_counter() - t:.1f}s: {info}",
                        file=sys.stderr,
                        flush=True,
                    )
                print(json.dumps(bench(data, path, n, args, work)), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
