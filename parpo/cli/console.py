"""Shared terminal output: one console, progress bars, summary tables."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

#: Columns a console writing to a pipe or a file lays tables out in (rich's own default is 80).
PIPE_WIDTH = 400
#: Every `--registry` option reads this environment variable when the flag is absent.
REGISTRY_ENV = "PARPO_REGISTRY"


def make_console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A console that, off a terminal (a pipe, a file, a CI log) and without ``COLUMNS`` set,
    never hard-wraps: a printed line stays one line and tables get the width they need, so a
    path is never split across lines. On a terminal it wraps at the terminal's width as usual."""
    c = Console(stderr=stderr, file=file)
    if not c.is_terminal:
        c.soft_wrap = True
        if "COLUMNS" not in os.environ:
            c.width = PIPE_WIDTH
    return c


console = make_console()
err = make_console(stderr=True)

#: The first words of the accelerator lines Lightning logs whenever a Trainer is built.
LIGHTNING_BANNER = ("GPU available:", "TPU available:", "HPU available:", "IPU available:")
#: Loggers Lightning sends them through (both package names Lightning ships under).
LIGHTNING_LOGGERS = ("pytorch_lightning.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero")


def _not_banner(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(LIGHTNING_BANNER)


def hide_lightning_banner() -> None:
    """Drop Lightning's "GPU available: False, used: False" lines (the device a run uses is in
    its config); every other Lightning message still shows. Imports nothing from Lightning."""
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if _not_banner not in logger.filters:
            logger.addFilter(_not_banner)


@contextmanager
def progress(description: str, total: int | None = None) -> Iterator[Any]:
    """A progress bar (to stderr) yielding ``advance(n)``."""
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,} rows"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def summary_table(summary: dict[str, Any], rejects: list[tuple[str, int]] | None = None) -> Table:
    t = Table(title=f"dataset ({summary['source']})", show_header=False, title_justify="left")
    t.add_column("key", style="bold")
    t.add_column("value", justify="right")
    for k in ("rows_in", "rows_accepted", "rows_rejected", "rows_written", "users", "items"):
        t.add_row(k, f"{summary[k]:,}")
    if summary.get("ids_trimmed"):
        t.add_row("ids_trimmed", f"{summary['ids_trimmed']:,}")
    for ev, n in summary["events_by_type"].items():
        t.add_row(f"events: {ev}", f"{n:,}")
    t.add_row("ts range", f"{summary['ts_min'] or '-'} .. {summary['ts_max'] or '-'}")
    for reason, n in rejects or []:
        t.add_row(f"rejected: {reason}", f"{n:,}")
    return t


@contextmanager
def stdout_for_json(as_json: bool) -> Iterator[None]:
    """With ``--json``, whatever a job prints to stdout while it runs (progress bars, metric
    lines) goes to stderr, so stdout carries only the JSON result printed after it."""
    if not as_json:
        yield
        return
    import sys
    from contextlib import redirect_stdout

    with redirect_stdout(sys.stderr):
        yield
