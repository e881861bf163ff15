"""``parpo data``: ingest logs, synthesise data, inspect datasets, cut splits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from data_pipelines.data_config import DataConfig

app = typer.Typer(
    help="Ingest interaction logs into canonical datasets; synthesise data; cut splits.", no_args_is_help=True
)

ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", help="Preset name under configs/data/ or a YAML file.")
]
Overrides = Annotated[
    list[str] | None,
    typer.Argument(help="Dotted overrides, e.g. split.seed=1 runtime.threads=2.", show_default=False),
]


JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the result (dataset, summary, splits) as one JSON object.")
]


def _echo_json(out: Path, summary: dict, splits: dict[str, Path], **extra: object) -> None:
    """``--json`` of a command that writes a dataset: the folder, its summary and splits (and ``extra``)."""
    splits_json = {k: str(v) for k, v in splits.items()}
    typer.echo(json.dumps({"out": str(out), **extra, "summary": summary, "splits": splits_json}, default=str))


def _result(as_json: bool, out: Path, summary: dict, splits: dict[str, Path], cfg) -> None:
    """The end of a command that writes a dataset: one JSON object, or the summary table and splits."""
    from parpo.cli.console import console, summary_table

    if as_json:
        _echo_json(out, summary, splits)
        return
    console.print(summary_table(summary))
    _print_splits(splits, cfg)


def _config(name: str | None, overrides: list[str] | None):
    from data_pipelines.data_config import DataConfig
    from parpo.presets import load

    return load(DataConfig, "data", name or "default", overrides)


def _top_rejects(out: Path, ingest_id: str | None = None, n: int = 5) -> list[tuple[str, int]]:
    import polars as pl

    paths = sorted((out / "rejects").glob(f"{ingest_id or '*'}.parquet"))
    if not paths:
        return []
    # One file at a time: rejects of release 0.1.0 lack raw_base64, and a multi-file read wants one schema.
    df = pl.concat([pl.read_parquet(p, columns=["reason"]) for p in paths])
    if not df.height:
        return []
    # Numbers become N so that reasons group; not a digit inside a word (UTF-8, U+0000).
    reason = (
        pl.col("reason")
        .str.replace_all(r"'[^']*'", "'…'")
        .str.replace_all(r"(^|[^\w+.-])-?\d[\d.e+:T-]*", "${1}N")
    )
    top = df.group_by(reason).len().sort("len", descending=True).head(n)
    return list(zip(top["reason"].to_list(), top["len"].to_list(), strict=True))


def _print_splits(paths: dict[str, Path], cfg) -> None:
    from parpo.cli.console import console

    if paths:
        console.print(f"splits: {', '.join(sorted(paths))} (seed {cfg.split.seed})")


@app.command()
def ingest(
    source: Annotated[
        str,
        typer.Option(
            "--source",
            "-s",
            help="Input format: a registered source adapter (taobao, amazon-s3rec, movielens, coat, obd, "
            "parpo-events, canonical; README has the table); a wrong name lists them.",
        ),
    ],
    input: Annotated[Path, typer.Option("--input", "-i", help="The file or folder as it lies on disk.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset folder (created, or appended to).")],
    map: Annotated[
        Path | None,
        typer.Option("--map", help="Canonical CSV only: YAML mapping of columns, events, timestamp format."),
    ] = None,
    splits: Annotated[bool, typer.Option(help="Write every applicable split (seed from config).")] = True,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
    overrides: Overrides = None,
) -> None:
    """Ingest a log into a canonical dataset; bad lines go to DIR/rejects/ with a reason.

    Appending to an existing DIR is one transaction; re-ingesting the same file is a no-op.
    """
    from parpo.api.data import ingest as run_ingest
    from parpo.cli.console import console, progress, stdout_for_json, summary_table

    cfg = _config(config, overrides)
    with stdout_for_json(as_json), progress(f"ingest {source}") as advance:
        res = run_ingest(
            source=source, input=input, out=out, map=map, splits=splits, config=cfg, progress=advance
        )
    if as_json:
        _echo_json(out, res.summary, res.splits or {}, unchanged=res.unchanged)
        return
    if res.unchanged:
        console.print(f"[yellow]already ingested[/]: {input} (same sha256); {out} unchanged")
        return
    last = res.summary["ingests"][-1]
    console.print(summary_table(res.summary, _top_rejects(out, last["id"])))
    if last["rows_rejected"]:
        console.print(f"{last['rows_rejected']:,} rejected lines with reasons: {out / last['rejects']}")
    _print_splits(res.splits, cfg)


@app.command()
def synth(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Dataset folder to create.")] = None,
    users: Annotated[int | None, typer.Option("--users", help="Number of users (synth.n_users).")] = None,
    items: Annotated[int | None, typer.Option("--items", help="Number of items (synth.n_items).")] = None,
    rounds: Annotated[
        int | None,
        typer.Option("--rounds", help="Exposure rounds (synth.rounds); with --continue-from: rounds to add."),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed", help="Generator seed (synth.seed); with --continue-from: the continuation's seed."
        ),
    ] = None,
    csv: Annotated[
        Path | None,
        typer.Option("--csv", help="Write the interactions as a canonical CSV here instead of a dataset."),
    ] = None,
    continue_from: Annotated[
        Path | None,
        typer.Option(
            "--continue-from",
            help="A synthetic dataset to continue: --out gets its rows plus --rounds more of the same world.",
        ),
    ] = None,
    new_users: Annotated[
        int | None, typer.Option("--new-users", help="With --continue-from: users who join (default 0).")
    ] = None,
    new_items: Annotated[
        int | None, typer.Option("--new-items", help="With --continue-from: items added (default 0).")
    ] = None,
    interest_drift: Annotated[
        float | None,
        typer.Option(
            "--interest-drift", help="With --continue-from: share of users whose interest turns (0-1)."
        ),
    ] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
    overrides: Overrides = None,
) -> None:
    """Synthesise a log with known interest and conformity (truth/ and uniform_test/ included).

    --continue-from DIR plays more rounds of DIR's world into a new --out (DIR is only read):
    new users and items appear and a share of users' interests drift (docs/synthetic.md).
    """
    from parpo.cli.console import console
    from parpo_core.errors import UserError

    grow = {"new_users": new_users, "new_items": new_items, "interest_drift": interest_drift}
    if continue_from is not None:
        clash = [n for n, v in (("--users", users), ("--items", items), ("--csv", csv)) if v is not None]
        clash += [o for o in overrides or [] if o.startswith("synth.")]
        spec = {"rounds": rounds, "seed": seed, **grow}
        _continue(continue_from, out, spec, clash, _config(config, overrides), as_json)
        return
    extra = [k for k, v in grow.items() if v is not None]
    if extra:
        flag = "--" + extra[0].replace("_", "-")
        raise UserError(f"{flag} needs --continue-from DIR (a synthetic dataset to continue)")
    flags = [
        f"synth.{k}={v}"
        for k, v in (("n_users", users), ("n_items", items), ("rounds", rounds), ("seed", seed))
        if v is not None
    ]
    cfg = _config(config, [*(overrides or []), *flags])
    from data_pipelines import synth as gen

    if csv is not None:
        n = gen.write_csv(cfg.synth, csv)
        if as_json:
            typer.echo(json.dumps({"csv": str(csv), "rows": n}))
        else:
            console.print(f"wrote {n:,} rows to {csv}")
        return
    if out is None:
        raise UserError("give --out DIR (a dataset folder to create) or --csv FILE")
    from parpo.api.data import synth as run_synth

    res = run_synth(out=out, config=cfg)
    _result(as_json, out, res.summary, res.splits, cfg)


def _continue(
    src: Path, out: Path | None, spec: dict, clash: list[str], cfg: DataConfig, as_json: bool = False
) -> None:
    """``parpo data synth --continue-from``: ``spec`` the continuation's flags (None: not given);
    ``clash`` the flags given that set the world, which is DIR's. ``cfg`` (the data config) only
    sets how the splits are cut."""
    from parpo.api.data import write_splits
    from parpo.cli.console import console
    from parpo.presets import validate, write_resolved
    from parpo_core.errors import UserError

    if clash:
        raise UserError(f"{clash[0]} does not go with --continue-from: the world's parameters are DIR's")
    if out is None or spec["rounds"] is None:
        raise UserError("--continue-from DIR needs --out NEW (a new folder) and --rounds R")
    from data_pipelines.synth import ContinueConfig, SynthConfig, write_continuation

    given = {k: v for k, v in spec.items() if v is not None}
    summary = write_continuation(
        src, out, validate(ContinueConfig, given, "synth --continue-from"), splits=False
    )
    world = SynthConfig.model_validate(json.loads((out / "truth" / "meta.json").read_text())["config"])
    write_resolved(cfg.model_copy(update={"synth": world}), out / "config.yaml")
    record = summary["synth"]["continuation"]
    _result(as_json, out, summary, write_splits(out, cfg), cfg)
    if not as_json:
        console.print(
            f"continuation {record['continuation']} of {src}: rounds {record['first_round']}.."
            f"{record['first_round'] + record['rounds'] - 1}, {record['new_users']} new users, "
            f"{record['new_items']} new items, {record['drifted_users']} users drifted (seed {record['seed']})"
        )


@app.command()
def summary(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json as it is.")] = False,
) -> None:
    """Show a dataset's accounting, counts and the commonest reject reasons."""
    from data_pipelines.dataset import Dataset
    from parpo.cli.console import console, summary_table

    s = Dataset(dataset).summary()
    if as_json:
        typer.echo(json.dumps(s, indent=2))
    else:
        console.print(summary_table(s, _top_rejects(dataset)))


@app.command()
def split(
    dataset: Annotated[Path, typer.Argument(help="Dataset folder.")],
    name: Annotated[
        str, typer.Option("--name", "-n", help="temporal, intervened, cold_users, cold_items or native.")
    ],
    config: ConfigOpt = None,
    overrides: Overrides = None,
) -> None:
    """Cut (or reuse) one split; select another realisation with split.seed=N."""
    from data_pipelines.dataset import Dataset
    from data_pipelines.splits import write_split
    from parpo.cli.console import console

    cfg = _config(config, overrides)
    path = write_split(
        Dataset(dataset), name, seed=cfg.split.seed, rule=cfg.split.positives, algorithm=cfg.split.algorithm
    )
    meta = json.loads((path / "meta.json").read_text())
    console.print(f"{name} (seed {cfg.split.seed}): {path}")
    console.print(json.dumps(meta.get("counts", {})))
