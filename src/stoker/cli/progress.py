"""Rich progress bars for long runs: done of total, rate, elapsed and time left."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class _Rate(ProgressColumn):
    """Steps per second, or per minute when slower (rich's own speed column counts bytes)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None:
            text = "–"
        elif speed >= 1:
            text = f"{speed:.1f}/s"
        else:
            text = f"{speed * 60:.1f}/min"
        return Text(text, style="progress.data.speed")


@contextmanager
def steps(console: Console) -> Iterator[Progress]:
    """A progress display on ``console`` (a bar per task: add them with ``add_task``)."""
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _Rate(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console,
    )
    with progress:
        yield progress
