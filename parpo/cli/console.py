"""Shared terminal output: one console, progress bars, summary tables."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(stderr=False)
err = Console(stderr=True)


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
