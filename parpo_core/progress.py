"""One progress style for long jobs: a rich bar on a terminal, one plain line per step anywhere
else (a CI log or a file keeps a readable record instead of carriage-return redraws).

``step_progress(description, total)`` returns ``advance(info)``: ``info`` (short text, e.g. the
step's metrics) is shown with the count; ``advance(None)`` closes. Both trainers use it, so a
reward run and a policy run look the same. rich is imported only when a terminal is there.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO

Advance = Callable[[str | None], None]


def step_progress(
    description: str, total: int | None, start: int = 0, *, stream: IO[str] | None = None
) -> Advance:
    """``advance(info)`` after each step, ``advance(None)`` at the end (module docstring)."""
    out = stream if stream is not None else sys.stderr
    if out.isatty():
        return _rich(description, total, start, out)
    t0, done = time.perf_counter(), [start]
    of = f"/{total}" if total else ""

    def line(info: str | None) -> None:
        if info is None:
            return
        done[0] += 1
        out.write(f"{description} {done[0]}{of}  {info}  {time.perf_counter() - t0:.1f}s\n")
        out.flush()

    return line


def _rich(description: str, total: int | None, start: int, out: IO[str]) -> Advance:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=Console(file=out),
    )
    task = bar.add_task(description, total=total, completed=start, info="")
    bar.start()

    def advance(info: str | None) -> None:
        if info is None:
            bar.stop()
            return
        bar.update(task, advance=1, info=info)

    return advance
